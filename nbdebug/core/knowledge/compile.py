"""torch.compile (dynamo, inductor)."""

from __future__ import annotations

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.knowledge._schema import Entry

__all__ = ["COMPILER_CALL_STEP", "ENTRIES"]

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="torch_compile",
        title="torch.compile failed or gave up",
        summary=(
            "torch.compile stopped[[ with {compile_error}]][[: {reason}]]."
            "[[ The function {function} was recompiled until it hit {limit_name} ({limit}).]]"
            "[[ The last guard that failed: {recompile_reason}.]]"
        ),
        keywords=("loweringexception", "recompilation cache limit", "dynamo", "inductor", "cache_size_limit", "recompile", "backendcompilerfailed", "cachelimitexceeded",
                  "cppcompileerror", "invalidcxxcompiler", "triton", "for torch.compile", "ptxas"),
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
            # Triton failing on the kernel the compiler generated (its PTX assembler, its codegen)
            r"Internal Triton PTX codegen error",
            r"\bPTXASError\b|ptxas fatal\s*:",
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
        sources=("https://github.com/pytorch/pytorch/issues/114511",),
    ),
)

# Triton's PTX assembler refusing the kernel it generated: its bundled ptxas predates this GPU's architecture
# ("Value 'sm_120a' is not defined for option 'gpu-name'"), which no compile log or graph break explains
PTXAS_STEP = ("Triton's bundled ptxas does not know this GPU's architecture (the sm_ value in the message): upgrade "
              "triton (with a torch release built for this GPU), or set TRITON_PTXAS_PATH to the ptxas of a CUDA "
              "toolkit that supports it; torch.compile(model, backend='eager') runs without Triton meanwhile.")
# any other failure of that assembler (or of Triton's PTX code generation) on a generated kernel
PTX_STEP = ("Read ptxas's own error in the message (the kernel Triton generated failed to assemble): upgrade triton to "
            "the release your torch pins, and run torch.compile(model, backend='aot_eager') to confirm that the "
            "failure is in Triton's code generation.")

# --- what ``compile_check`` / ``%%compilecheck`` find: the kinds of their findings ------------------------------

_TROUBLESHOOTING = "https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html"
_FAQ = "https://pytorch.org/docs/stable/torch.compiler_faq.html"

ENTRIES += (
    Entry(
        slug="graph_break",
        title="torch.compile graph break",
        severity=Severity.WARNING,
        contexts=(),
        summary="Dynamo stopped tracing at this line: the function runs as several graphs with Python in between.",
        fixes=(
            Fix("Turn every graph break into an error at its line", "torch.compile(fn, fullgraph=True)"),
            Fix("See every graph break and its reason", "TORCH_LOGS=graph_breaks python train.py"),
        ),
        sources=(_TROUBLESHOOTING,),
    ),
    Entry(
        slug="compile_recompilation",
        title="torch.compile recompiled a function",
        severity=Severity.WARNING,
        contexts=(),
        summary="A guard failed on a later call: something the graph was specialized on changed.",
        fixes=(
            Fix("Keep the input named by the failing guard constant between calls"),
            Fix("See why it recompiles", "TORCH_LOGS=recompiles python train.py"),
        ),
        sources=(_TROUBLESHOOTING,),
    ),
    Entry(
        slug="recompile_limit",
        title="torch.compile hit the recompile limit and runs the function eagerly",
        severity=Severity.ERROR,
        contexts=(),
        summary="After recompile_limit (cache_size_limit before torch 2.6) recompilations Dynamo gives up on the "
        "function: it runs without any speed-up from then on.",
        fixes=(
            Fix("Find what changes between calls (the failing guard) and make it static"),
            Fix("Only if the number of variants is small and bounded, raise the limit",
                "torch._dynamo.config.recompile_limit = 16  # cache_size_limit before torch 2.6"),
        ),
        sources=(_FAQ, "https://github.com/pytorch/pytorch/issues/114511"),
    ),
    # graph-break reasons, searched in order (the first entry whose pattern matches the reason wins)
    Entry(
        slug="graph_break_item",
        title="Tensor.item()",
        severity=Severity.WARNING,
        contexts=("graph_break",),
        patterns=(r"\.item\(\)",),
        fixes=(
            Fix("Move .item() out of the compiled function: return the tensor and read it outside"),
            Fix("Or keep it in the graph", "torch._dynamo.config.capture_scalar_outputs = True"),
        ),
        sources=(_TROUBLESHOOTING,),
    ),
    Entry(
        slug="graph_break_print",
        title="print()",
        severity=Severity.WARNING,
        contexts=("graph_break",),
        patterns=(r"\bprint\b|builtin(?:(?!builtin)[^\n])*print",),
        fixes=(Fix("Move print() out of the compiled function: log the returned tensors after the call"),),
        sources=(_TROUBLESHOOTING,),
    ),
    Entry(
        slug="graph_break_branch",
        title="data-dependent control flow",
        severity=Severity.WARNING,
        contexts=("graph_break",),
        patterns=(r"[Dd]ata-dependent|generic_jump|jump(?:(?!jump)[^\n])*[Tt]ensor|branch",),
        fixes=(
            Fix("Replace `if tensor:` with torch.cond or torch.where",
                "y = torch.cond(pred, true_fn, false_fn, (x,))\n# or: y = torch.where(pred, a, b)"),
        ),
        sources=("https://pytorch.org/docs/stable/cond.html",),
    ),
    Entry(
        slug="graph_break_dynamic_shape",
        title="data-dependent output shape",
        severity=Severity.WARNING,
        contexts=("graph_break",),
        patterns=(r"nonzero|dynamic shape operator|aten\.unique|masked_select",),
        fixes=(
            Fix("Keep shapes static with a mask", "y = torch.where(mask, x, 0)  # not x[mask]"),
            Fix("Or let Dynamo capture data-dependent shapes",
                "torch._dynamo.config.capture_dynamic_output_shape_ops = True"),
        ),
        sources=(_TROUBLESHOOTING,),
    ),
    Entry(
        slug="graph_break_unsupported",
        title="unsupported call",
        severity=Severity.WARNING,
        contexts=("graph_break",),
        patterns=(r"[Cc]all to.*skipped|[Ss]kip|not supported|[Uu]nsupported",),
        fixes=(
            Fix("Move the unsupported call out of the compiled region"),
            Fix("Or leave it out of compilation", "@torch.compiler.disable\ndef helper(x):\n    ..."),
        ),
        sources=(_TROUBLESHOOTING,),
    ),
    # guards that failed (why a function recompiled), searched in order
    Entry(
        slug="guard_shape",
        title="tensor shape changed",
        severity=Severity.WARNING,
        contexts=("guard",),
        patterns=(r"size mismatch|\.size\(\)|stride mismatch|sizes\(\)",),
        fixes=(
            Fix("Mark the changing dimension dynamic",
                "torch._dynamo.mark_dynamic(x, 0)  # before the call\n# or: torch.compile(fn, dynamic=True)"),
            Fix("Or pad/bucket inputs to a few sizes"),
        ),
        sources=(_TROUBLESHOOTING,),
    ),
    Entry(
        slug="guard_dtype_device",
        title="tensor dtype/device/requires_grad changed",
        severity=Severity.WARNING,
        contexts=("guard",),
        patterns=(r"dtype|device|requires_grad",),
        fixes=(
            Fix("Call the compiled function with one dtype/device/requires_grad setting (cast before the call)",
                "x = x.to(device, torch.float32)"),
        ),
        sources=(_TROUBLESHOOTING,),
    ),
    Entry(
        slug="guard_python_value",
        title="Python value baked into the graph",
        severity=Severity.WARNING,
        contexts=("guard",),
        patterns=(r"==\s*-?\d+(\.\d+)?(e-?\d+)?\b|==\s*'|==\s*\"|___check_obj_id|ID_MATCH|TYPE_MATCH",),
        fixes=(
            Fix("Pass values that change between calls (step counters, schedules, modes) as tensors, or keep "
                "them constant", "step_t = torch.tensor(step)  # not a Python int"),
            Fix("Strings and objects used in control flow specialize the graph: keep them constant between calls"),
        ),
        sources=(_FAQ,),
    ),
    Entry(
        slug="torchscript_error",
        title="TorchScript (torch.jit.trace / script) could not handle the model",
        summary=("torch.jit could not trace or script this model: tracing records only tensors (and tuples, lists or "
                 "dicts of them) flowing through the code, and scripting compiles only the Python subset TorchScript "
                 "supports."),
        keywords=("torch/csrc/jit/", "traced functions", "torch::jit::tracer", "torch.jit.frontend", "tracer cannot infer",
                  "could not export python function", "torchscript", "nonexistent attribute or method",
                  "is being compiled since"),
        patterns=(
            r"can be output from traced functions",
            r"torch::jit::tracer::",
            # an old c10::Error names the C++ file that raised it: one under torch/csrc/jit is TorchScript's
            r"\(\w{1,100} at [^\n()]{0,300}torch/csrc/jit/[\w/]{1,200}\.(?:h|cpp):\d+\)",
            r"torch\.jit\.frontend\.\w+Error",
            r"Tracer cannot infer type of",
            r"Could not export Python function call",
            # a scripted module's code reading an attribute or method TorchScript did not compile ('__torch__.Net')
            r"Tried to access nonexistent attribute or method '\w+' of type '__torch__\.",
            # the script compiler's chain of functions it was compiling when it failed
            r"is being compiled since it was called from '__torch__\.",
        ),
        priority=55,
        causes=(
            "The model returns something that is not a tensor or a tuple / list / dict of tensors (a custom object, "
            "None, a dataclass), or takes such inputs.",
            "Code TorchScript does not support (dynamic Python types, unsupported builtins) in a scripted function.",
            "An old torch release with a narrower tracer (only tensors or tuples of tensors as outputs).",
        ),
        fixes=(
            Fix("Trace a wrapper that returns tensors only", "class Wrapper(torch.nn.Module):\n"
                "    def __init__(self, m): super().__init__(); self.m = m\n"
                "    def forward(self, x): return self.m(x)['logits']\n"
                "traced = torch.jit.trace(Wrapper(model).eval(), example)"),
            Fix("Export with torch.export instead (the maintained path)", "ep = torch.export.export(model, (example,))"),
        ),
        first_step="Look at what the model returns (and takes): trace a small wrapper whose forward returns only "
        "tensors, or move to torch.export.",
        sources=("https://pytorch.org/docs/stable/generated/torch.jit.trace.html",
                 "https://pytorch.org/docs/stable/export.html"),
    ),
)

# the first step, with the call the code's line makes
COMPILER_CALL_STEP = ("Print what {api} returns in the installed torch (type(...)) and read that function's "
                      "documentation for this release: use the result as it documents (or install the torch release "
                      "the code was written for).")
ENTRIES += (
    Entry(
        slug="compiler_call_rejected",
        title="The code's call into torch's compiler or exporter does not fit this torch",
        summary=("{exc_type} was raised at {where}, on the value {api} returned or was given: that API of the "
                 "installed torch does not return or take what the code expects."),
        causes=("Code written for another torch release, whose compiler or exporter API returned something else "
                "(torch.jit.trace once returned a (trace, output) pair; torch.onnx.export and torch.export changed "
                "their arguments and results between releases).",
                "A decorator form used as a call, or a call used as a decorator (torch.jit.script, torch.compile)."),
        fixes=(Fix("See what the call returns in this torch", "import torch\nprint(torch.__version__)\n"
                   "out = torch.jit.trace(model, example)\nprint(type(out))"),),
        first_step=COMPILER_CALL_STEP.format(api="the compiler or exporter call"),
        sources=("https://pytorch.org/docs/stable/generated/torch.jit.trace.html",
                 "https://pytorch.org/docs/stable/onnx.html",
                 "https://pytorch.org/docs/stable/export.html"),
        extra={"family": "compile"},
    ),
)

ENTRIES += (
    Entry(
        slug="onnx_export_failed",
        title="torch.onnx.export could not convert the model",
        facts=((r"to ONNX opset version (?P<opset>\d{1,3})", {"opset": "int"}),),
        summary=("{exc_type} was raised by torch's ONNX exporter[[ ({where})]][[, called from the code at "
                 "{user_where}]]: an operator or construct of the model has no ONNX conversion[[ at opset "
                 "{opset}]]."),
        causes=("An operator added to ONNX only in a later opset than the one asked for (the message names the "
                "opset that added it).",
                "An operator or a Python construct the exporter has no conversion for at any opset (a custom "
                "operator, data-dependent control flow, an in-place op on a view).",
                "The older TorchScript-based exporter, where the dynamo-based one (torch.onnx.export(..., "
                "dynamo=True)) converts more."),
        fixes=(Fix("Export at the opset the message names, or with the newer exporter",
                   "torch.onnx.export(model, args, 'model.onnx', opset_version=17)\n"
                   "# or: torch.onnx.export(model, args, 'model.onnx', dynamo=True)"),),
        first_step=("Read the operator and opset the exporter names: export with opset_version at least the one it "
                    "says added the operator (or try torch.onnx.export(..., dynamo=True)); with no opset that has "
                    "it, replace that operation in the model's forward for the export."),
        sources=("https://pytorch.org/docs/stable/onnx.html",
                 "https://pytorch.org/docs/stable/onnx_torchscript_supported_aten_ops.html"),
        extra={"family": "compile"},
    ),
)

ENTRIES += (
    Entry(
        slug="runtime_operator_missing",
        title="The ExecuTorch runtime has no kernel for an operator of the program",
        summary=("The program (.pte) uses an operator[[ ({operator})]] for which the runtime that loads it has no "
                 "kernel registered, so the method cannot load or run."),
        causes=("The runner was linked without the kernel libraries (the portable or optimized ops library without "
                "--whole-archive, the selective-build operator library generated for another model, or without "
                "executorch's prim ops).",
                "A runtime built from another ExecuTorch version than the one that exported the program.",
                "No kernel library has that operator (the portable library lacks it): the export left it on the CPU."),
        fixes=(Fix("Link the kernel libraries whole into the runner",
                   "target_link_libraries(app PRIVATE executorch -Wl,--whole-archive portable_ops_lib "
                   "-Wl,--no-whole-archive portable_kernels)"),),
        first_step=("Link the kernel libraries into the runner that loads the program (the portable or optimized ops "
                    "library with --whole-archive, or the selective-build library generated for this model, with "
                    "executorch's prim ops), built from the same ExecuTorch version as the export; if no kernel "
                    "library has the operator it names, lower it to a backend or replace it before export."),
        sources=("https://pytorch.org/executorch/stable/getting-started-faqs.html",
                 "https://pytorch.org/executorch/stable/kernel-library-selective-build.html"),
        extra={"family": "install_build,compile"},
    ),
)
