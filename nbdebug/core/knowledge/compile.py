"""torch.compile (dynamo, inductor)."""

from __future__ import annotations

from nbdebug.core._findings import Fix
from nbdebug.core.knowledge._schema import Entry
from nbdebug.core.knowledge._sources import SEED_TROUBLE

__all__ = ["ENTRIES"]

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="torch_compile",
        title="torch.compile failed or gave up",
        summary=(
            "torch.compile stopped[[ with {compile_error}]][[: {reason}]]."
            "[[ The function {function} was recompiled until it hit {limit_name} ({limit}).]]"
            "[[ The last guard that failed: {recompile_reason}.]]"
        ),
        keywords=("dynamo", "inductor", "cache_size_limit", "recompile", "backendcompilerfailed", "cachelimitexceeded",
                  "cppcompileerror", "invalidcxxcompiler", "triton", "for torch.compile"),
        patterns=(
            r"torch\._dynamo\.exc\.\w+",
            r"torch\._inductor\.exc\.\w+",
            r"BackendCompilerFailed",
            r"(?:torch\._dynamo|torchdynamo) hit (?:config\.)?(?:cache_size_limit|recompile_limit|accumulated_cache_size_limit)",
            r"hit recompilation cache limit",
            r"CacheLimitExceeded",
            r"FailOnRecompileLimitHit",
            r"InductorError",
            r"LoweringException",
            r"Dynamo failed to run FX node",
            r"Dynamo is not supported on Python",
            r"not (?:yet )?supported for torch\.compile",
            # the advice Dynamo prints under every failure it raises
            r"torch\._dynamo\.config\.suppress_errors = True",
            r"TORCHDYNAMO_VERBOSE=1 for more information",
            r"\b(?:CppCompileError|InvalidCxxCompiler)\b",
            r"Cannot find a working triton installation",
        ),
        # frames and source lines only the backend compiler runs (a paste that lost its error line, or the
        # frames Dynamo logs as warnings)
        frames=(
            r"compiled_(?:gm|fn) = compiler_fn\(gm, ",
            r"[/\\]torch[/\\]_dynamo[/\\]repro[/\\]after_(?:dynamo|aot)\.py\", line \d+",
            r"[/\\]torch[/\\]_inductor[/\\]compile_fx\.py\", line \d+, in "
            r"(?:_?compile_fx(?:_inner|_main)?|fx_codegen_and_compile)\b",
        ),
        # also recognised from a truncated traceback whose last frame is ``raise BackendCompilerFailed(...``
        exception_types=("BackendCompilerFailed", "InductorError", "LoweringException", "CacheLimitExceeded",
                         "FailOnRecompileLimitHit", "CppCompileError", "InvalidCxxCompiler",
                         # generic class names, only when they come from torch._dynamo.exc
                         "torch._dynamo.exc.Unsupported", "torch._dynamo.exc.UserError",
                         "torch._dynamo.exc.TorchRuntimeError", "torch._dynamo.exc.InternalTorchDynamoError"),
        priority=45,
        facts=(
            (r"(?:torch\._dynamo\.exc|torch\._inductor\.exc)\.(?P<compile_error>\w+)(?::\s*(?P<reason>[^\n]+))?",
             {"compile_error": "str", "reason": "str"}),
            (r"hit (?:config\.)?(?P<limit_name>cache_size_limit|recompile_limit|accumulated_cache_size_limit) \((?P<limit>\d+)\)",
             {"limit_name": "str", "limit": "int"}),
            (r"function: '(?P<function>[^']+)'", {"function": "str"}),
            (r"(?:last reason|reasons):\s+(?P<recompile_reason>[^\n]+)", {"recompile_reason": "str"}),
        ),
        causes=(
            "Recompilations: shapes, Python scalars or object ids change between calls, and each change recompiles "
            "until the limit (cache_size_limit, renamed recompile_limit) is hit; the frame then runs eagerly.",
            "Code Dynamo cannot trace under fullgraph=True: data-dependent Python control flow, .item(), "
            "unsupported Python or C calls.",
            "A bug or missing lowering in the compiler backend (BackendCompilerFailed / InductorError).",
        ),
        fixes=(
            Fix("See why it recompiles", "TORCH_LOGS=recompiles python train.py"),
            Fix("Mark the varying dimension dynamic (or pad to fixed sizes)", "torch._dynamo.mark_dynamic(x, 0)\n# or torch.compile(model, dynamic=True)"),
            Fix("See graph breaks and their reasons", "TORCH_LOGS=graph_breaks python train.py"),
            Fix("Isolate the backend: if eager backend works, the bug is in inductor", "torch.compile(model, backend='eager')"),
        ),
        first_step="Run once with TORCH_LOGS=recompiles,graph_breaks to see what changes between calls or "
        "what cannot be traced.",
        sources=(SEED_TROUBLE, "https://github.com/pytorch/pytorch/issues/114511"),
    ),
)
