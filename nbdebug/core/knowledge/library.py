"""Errors raised by the libraries around PyTorch, with the fixes their documentation gives.

transformers, Lightning, accelerate, PEFT, DeepSpeed and diffusers: ``extra["family"]`` names the family of
problem an entry belongs to where its domain does not say it (a DeepSpeed error is a distributed-training one).
"""

from __future__ import annotations

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES", "LIBRARY_STEP", "REGISTRY_LISTS"]

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="peft_target_modules",
        title="PEFT found none of the target modules in the model",
        summary=("LoRA (PEFT) adapts the layers named in target_modules[[ ({targets})]], and the model has no layer of "
                 "that name: the names come from another architecture (q_proj / v_proj are LLaMA's; BLOOM and "
                 "ChatGLM use query_key_value, GPT-2 c_attn)."),
        keywords=("target modules", "target_modules"),
        patterns=(r"Target modules [^\n]{0,300}? not found in the base model",
                  r"Please specify `?target_modules`? in `?peft_config`?"),
        priority=64,
        facts=((r"Target modules (?P<targets>[^\n]{0,300}?) not found in the base model", {"targets": "str"}),),
        causes=(
            "target_modules copied from a recipe for another architecture.",
            "An empty list: a helper that collects the linear layers found none (a quantized model whose layers are "
            "not nn.Linear, or a name filter that matched nothing).",
        ),
        fixes=(
            Fix("List the model's linear layers and pick from those names",
                "names = {n.split('.')[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}\n"
                "print(sorted(names))\nconfig = LoraConfig(target_modules=['query_key_value'])  # names from the list"),
        ),
        first_step="Print the names of the model's linear layers (the live panel lists them) and set target_modules "
        "to some of those names.",
        sources=("https://huggingface.co/docs/peft/developer_guides/troubleshooting",
                 "https://huggingface.co/docs/peft/package_reference/lora"),
    ),
    Entry(
        slug="deepspeed_zero3_params",
        title="DeepSpeed ZeRO-3 found its gathered parameters out of step",
        summary=("DeepSpeed ZeRO-3 gathers each partitioned parameter before a module runs and releases it after; "
                 "here a parameter was still gathered at the end of a step (or fetched twice in one trace), which "
                 "happens when the modules do not run in the same order every step."),
        keywords=("inflight params", "already in registry", "not_available", "invalidate trace cache"),
        patterns=(r"still have inflight params", r"ds_summary\(\)\}? already in registry",
                  # the prefetcher's trace of the module order, replayed on a step that ran another order
                  r"tracing error at step \w+, due to `?NOT_AVAILABLE`? parameters",
                  r"Invalidate trace cache @ step \d+: expected module \d+, but got module \d+",
                  r"\balready in registry\b[^\n]{0,80}(?:ds_|param)"),
        priority=60,
        extra={"family": "distributed"},
        causes=(
            "Modules that run in a different order (or a different number of times) from step to step: dynamic "
            "control flow, a generation loop, DeepSpeed-Chat's hybrid engine, a module called twice.",
            "ZeRO-3 prefetching together with parameter offload, in DeepSpeed releases with known bugs there.",
        ),
        fixes=(
            Fix("Turn prefetching off (the parameter order may then change freely)",
                '"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0}'),
            Fix("Upgrade DeepSpeed, or use ZeRO-2 for this model", "pip install -U deepspeed"),
        ),
        first_step="Set stage3_prefetch_bucket_size to 0 (or disable the hybrid engine / offload) and upgrade "
        "DeepSpeed; if the model's module order changes per step, ZeRO-2 avoids the problem.",
        sources=("https://deepspeed.readthedocs.io/en/latest/zero3.html",
                 "https://github.com/deepspeedai/DeepSpeed/issues"),
    ),
    Entry(
        slug="transformers_unknown_model",
        title="transformers does not know this model type (or not for this Auto class)",
        summary=("The checkpoint's config names a model type[[ ({model_type})]] that the installed transformers does "
                 "not have: the model is newer than this transformers, or its classes live in the model's own code."),
        keywords=("does not recognize this architecture", "unrecognized configuration class", "keyerror: '",
                  "is not currently imported"),
        patterns=(r"Transformers does not recognize this architecture",
                  r"Tokenizer class \w+ does not exist or is not currently imported",
                  r"Unrecognized configuration class <class '[^'\n]{1,300}'> for this kind of AutoModel",
                  # the same, pasted without frames: a bare KeyError whose key is a model type of the Hub's
                  # decoder families (releases before 4.28 lack 'llama'; 'mistral', 'qwen2', 'gemma' came later)
                  r"(?m)^KeyError: '(?:llama|mistral|mixtral|qwen2(?:_moe|_vl)?|qwen3(?:_moe)?|gemma[23]?|phi3?|"
                  r"starcoder2|falcon|gpt_bigcode|deepseek_v[23]|cohere|olmo2?|stablelm|internlm2|baichuan|"
                  r"chatglm|mllama|llava(?:_next)?|idefics2|paligemma|siglip|clip_vision_model|dinov2|mamba2?|"
                  r"jamba|dbrx|persimmon|gptj|gpt_neox|mpt)'[ \t]*$"),
        # releases before the ValueError: a bare KeyError of the model type from the Auto classes' mapping
        frames=(r"^[ \t]*File \"[^\"\n]*transformers[/\\]models[/\\]auto[/\\]configuration_auto\.py\", line \d+, "
                r"in __getitem__[ \t]*\n(?:[^\n]*\n)?[ \t]*KeyError: ",),
        priority=66,
        extra={"family": "environment_version"},
        facts=((r"has model type `(?P<model_type>[\w-]{1,80})`", {"model_type": "str"}),),
        causes=(
            "The model was added to transformers after the installed release.",
            "The model ships its own code (trust_remote_code) or registers its classes when the project's package "
            "is imported, and that did not happen before AutoModel.from_pretrained.",
            "The wrong Auto class for this model ('Unrecognized configuration class ... for this kind of AutoModel'): "
            "a vision-language or encoder model loaded with AutoModelForCausalLM; use the class its model card names.",
        ),
        fixes=(
            Fix("Upgrade transformers", "pip install -U transformers"),
            Fix("Let the model's own code define it (only for a repository you trust)",
                "AutoModel.from_pretrained(name, trust_remote_code=True)"),
        ),
        first_step="Upgrade transformers to a release that has the model type (its model card names one); for a model "
        "with its own code, import the project's package or pass trust_remote_code=True.",
        sources=("https://huggingface.co/docs/transformers/model_doc/auto",
                 "https://huggingface.co/docs/transformers/custom_models"),
    ),
)

# The first step of ``library_raised``, filled with the package, the frame that raised, the user's call into it and
# the package's distribution name (what pip knows it as).  The library's message names what it rejected (an argument,
# a value) or what it needs first (a login, a fit, a key): that is the fix far more often than its release.
LIBRARY_STEP = ("Read the message {package} raised at {where}: it names the argument or value it rejected, or what "
                "it needs first (log in, call fit, add the key). Change that in {call}, with the {package} "
                "documentation for that call. Only if the code was written for another release of {package}, compare with the installed "
                "one (pip show {dist}).")
ENTRIES += (
    Entry(
        slug="library_raised",
        title="A library rejected what the code passed to it",
        summary=("{exc_type} was raised inside {package}[[ ({where})]], called from the code[[ at {user_where}]]: "
                 "{package} checked the arguments or state it was given and refused them."),
        causes=("An argument or value the library does not accept for that call (a negative rate, a count that "
                "does not divide, a key or column it does not have), or a step it needs first (log in, fit, a "
                "setting): its message names which.",
                "A value of another kind than the library expects (None, a tuple, a str) reaching it.",
                "Code written for another release of the library than the installed one."),
        fixes=(Fix("See the installed release", "import importlib.metadata as md\nprint(md.version('<package>'))"),),
        first_step=("Read the library's message at the last frame of the traceback: it names the argument or value it "
                    "rejected, or what it needs first; change that in the code's call, with the library's "
                    "documentation for that call. Only if the code was written for another release, compare with "
                    "the installed one."),
        sources=("https://packaging.python.org/en/latest/tutorials/installing-packages/",
                 "https://docs.python.org/3/library/importlib.metadata.html"),
        extra={"family": "library_api_misuse"},
    ),
    Entry(
        slug="lightning_fork_after_cuda",
        title="Lightning cannot fork its processes: CUDA is already initialised in the notebook",
        summary=("Lightning's fork-based strategies (ddp_notebook / ddp_fork, the default for several GPUs in a "
                 "notebook) start their processes by forking the kernel, and a forked process cannot use CUDA once the "
                 "kernel has initialised it (a .cuda() / .to('cuda'), a torch.cuda call, a model loaded on the GPU)."),
        keywords=("can't create new processes if cuda",),
        patterns=(r"Lightning can't create new processes if CUDA is already initiali[sz]ed",),
        priority=70,
        extra={"family": "distributed"},
        causes=("A cell before trainer.fit moved a model or tensor to the GPU, or called torch.cuda.* (memory stats, "
                "set_device), or a library did it while loading a model.",
                "trainer.fit run a second time in the same kernel, after a first run used the GPU."),
        fixes=(Fix("Keep every CUDA call out of the kernel before trainer.fit (restart it first)",
                   "trainer = L.Trainer(accelerator='gpu', devices=2, strategy='ddp_notebook')\n"
                   "trainer.fit(model)   # the model still on the CPU: Lightning moves it in each process"),
               Fix("Run the training as a script with a spawning strategy",
                   "# train.py\ntrainer = L.Trainer(devices=2, strategy='ddp')   # python train.py")),
        first_step="Restart the kernel and run trainer.fit with nothing moved to the GPU before it (no .cuda(), no "
        "torch.cuda calls); or train on one device, or as a script with strategy='ddp'.",
        sources=("https://lightning.ai/docs/pytorch/stable/accelerators/gpu_intermediate.html",),
    ),
    Entry(
        slug="lightning_mixed_packages",
        title="Lightning's Trainer does not recognise the model as its LightningModule",
        summary=("The Trainer does not recognise the model[[ ({model_class})]] as a LightningModule: usually the model "
                 "subclasses LightningModule from one package (pytorch_lightning or lightning) and the Trainer comes "
                 "from the other; otherwise the object is not a LightningModule at all."),
        keywords=("must be a `lightningmodule`", "must be a lightningmodule"),
        patterns=(r"`?model`? must be a `?LightningModule`?",),
        priority=62,
        extra={"family": "environment_version,library_api_misuse"},
        facts=((r"got `(?P<model_class>\w{1,120})`", {"model_class": "str"}),),
        causes=("pytorch_lightning and lightning (lightning.pytorch) are separate packages with separate classes; code "
                "or a library that mixes them fails the Trainer's isinstance check.",
                "A plain nn.Module (a transformers model, a compiled or wrapped model) passed to trainer.fit without a "
                "LightningModule around it."),
        fixes=(Fix("Import both from one package", "import lightning.pytorch as pl   # or: import pytorch_lightning as pl\n"
                   "class Model(pl.LightningModule): ...\ntrainer = pl.Trainer()"),),
        first_step="Print type(model).__mro__: if it lists a LightningModule, import it and the Trainer from the same "
        "package (both lightning.pytorch or both pytorch_lightning, also in the library that defines the model) and "
        "restart the kernel; if it lists none, wrap the model in a LightningModule.",
        sources=("https://lightning.ai/docs/pytorch/stable/starter/installation.html",),
    ),
    Entry(
        slug="deepspeed_zero3_partitioned",
        title="A ZeRO-3 partitioned parameter was used outside a gather",
        summary=("Under DeepSpeed ZeRO-3 a parameter outside its gather is an empty placeholder; here code read it as "
                 "if it were whole[[ ({length} elements from a tensor of size 1)]]."),
        keywords=("exceeds dimension size",),
        patterns=(r"start \(\d{1,18}\) \+ length \(\d{0,18}\) exceeds dimension size \(1\)",),
        extra={"family": "distributed", "requires": r"(?i:deepspeed|zero[-_ ]?3|partition_parameters|zero\.Init)"},
        priority=62,
        facts=((r"\+ length \((?P<length>\d{1,18})\)", {"length": "int"}),),
        causes=("The model was built or its weights initialised outside deepspeed.zero.Init, or weights are touched "
                "outside GatheredParameters.",
                "A DeepSpeed release that does not fit the torch or transformers installed."),
        fixes=(Fix("Touch the weights only while they are gathered",
                   "with deepspeed.zero.GatheredParameters(model.parameters()):\n    ...  # read or set weights here"),),
        first_step="Build and initialise the model inside deepspeed.zero.Init (or touch the weights only inside "
        "GatheredParameters), with the DeepSpeed release the example was written for.",
        sources=("https://deepspeed.readthedocs.io/en/latest/zero3.html",),
    ),
    Entry(
        slug="deepspeed_ranks_disagree",
        title="DeepSpeed ZeRO-3 found the ranks fetching different parameters",
        summary=("ZeRO-3 compares the parameters each rank gathers, and rank 0 and another rank disagree: the ranks "
                 "ran different modules (or a different number of forward passes) at this step."),
        keywords=("disagreement between rank",),
        patterns=(r"disagreement between rank\d+ and rank\d+",),
        priority=62,
        extra={"family": "distributed"},
        causes=("Code that runs on some ranks only (evaluation, generation or logging with the model on rank 0), or "
                "a different number of batches per rank (an uneven evaluation set).",
                "A model whose modules depend on the data (mixture of experts, skipped layers), so ranks fetch "
                "different parameters."),
        fixes=(Fix("Run the same calls on every rank",
                   "# every rank calls model(...) the same number of times; gather results instead of\n"
                   "# running evaluation only on rank 0"),),
        first_step="Make every rank run the same forward (and backward) calls at that step: no rank-only evaluation or "
        "generation, the same number of batches on each rank; for data-dependent modules, run every module on every "
        "rank.",
        sources=("https://deepspeed.readthedocs.io/en/latest/zero3.html",),
    ),
    Entry(
        slug="pipeline_no_device",
        title="A transformers pipeline was built without a device and runs on the CPU",
        severity=Severity.WARNING,
        summary="A GPU is available, but the transformers pipeline was created without device=, so its model runs on "
                "the CPU.",
        keywords=("passed to the `pipeline` object", "passed to the 'pipeline' object"),
        patterns=(r"no [`']device[`'] argument is passed to the [`']Pipeline[`'] object",),
        priority=40,
        extra={"warning": "yes"},
        causes=("pipeline(...) called without device= (older transformers releases do not move the model to the GPU "
                "by themselves).",),
        fixes=(Fix("Name the device", "pipe = pipeline('text-classification', model=name, device=0)  # or device='cuda'"),),
        first_step="Pass device=0 (or device='cuda', or device_map='auto' for a large model) when creating the "
        "pipeline.",
        sources=("https://huggingface.co/docs/transformers/main_classes/pipelines",),
    ),
    Entry(
        slug="bitsandbytes_setup",
        title="bitsandbytes found no native library for this CUDA, platform or GPU",
        summary=("bitsandbytes could not load a compiled library that fits the installed CUDA runtime, the platform "
                 "(Windows before 0.43) or the GPU, so its 8-bit optimizers and layers are not available."),
        keywords=("bitsandbytes cuda binary", "bitsandbytes native library", "cuda setup failed", "cadam32bit", "compiled without gpu support", "libbitsandbytes",
                  "cquantize_blockwise", "cget_managed_ptr", "module 'bitsandbytes'"),
        patterns=(r"CUDA Setup failed despite GPU being available",
                  r"has no attribute '(?:cadam32bit_grad_fp32|cquantize_blockwise_fp16\w*|cget_managed_ptr)'",
                  # its own subpackages (nn, optim) missing: its import stopped where the native library failed
                  r"module 'bitsandbytes' has no attribute '(?:nn|optim|functional|cextension)'",
                  r"bitsandbytes was compiled without GPU support",
                  r"Could not (?:find the bitsandbytes CUDA binary|load bitsandbytes native library)"),
        priority=80,  # its library's name, more than a shared object that does not load
        # its first step (python -m bitsandbytes, a build for this CUDA) is a reinstall as much as a version
        extra={"family": "environment_version,install_build"},
        causes=("A bitsandbytes release older than the CUDA runtime of the installed torch (no libbitsandbytes_cudaXXX "
                "for it).",
                "Windows with a release before 0.43, which shipped no Windows build.",
                "BNB_CUDA_VERSION or LD_LIBRARY_PATH pointing at another CUDA than torch's."),
        fixes=(Fix("Upgrade bitsandbytes and look at what it finds", "%pip install -U bitsandbytes\n!python -m bitsandbytes"),),
        first_step="Upgrade bitsandbytes (pip install -U bitsandbytes: 0.43+ has Windows and recent CUDA builds), then "
        "run python -m bitsandbytes to see which CUDA library it loads.",
        sources=("https://huggingface.co/docs/bitsandbytes/main/en/installation",),
    ),
)

# How each library lists the names its registry holds, keyed by its message's wording (``registry_name_missing``'s
# fix for the library that raised; {name} is the name the message says is missing).
REGISTRY_LISTS: tuple[tuple[str, Fix], ...] = (
    (r"Unknown model \(", Fix("List the model names the installed timm has", "import timm\n"
                              "print(timm.list_models('*{prefix}*'))  # and timm.list_models(pretrained=True)")),
    (r"is not in the \w+::\w+ registry|registry\. Please check whether the value",
     Fix("List the names the mmengine registry holds (the scope the message names: mmdet, mmpose, ...)",
         "from mmdet.registry import MODELS   # the scope and registry the message names\n"
         "print(sorted(MODELS.module_dict))")),
    (r"No object named '", Fix("Print the detectron2 (fvcore) registry the message names: it lists its names",
                               "from detectron2.modeling import META_ARCH_REGISTRY   # the registry the message names\n"
                               "print(META_ARCH_REGISTRY)")),
    (r"is not a registered name for", Fix("List the names the allennlp / tango class registers",
                                          "from allennlp.models import Model   # the class the message names\n"
                                          "print(Model.list_available())")),
)

ENTRIES += (
    Entry(
        slug="registry_name_missing",
        title="A name the configuration asks for is not registered in the installed library",
        summary=("The configuration names[[ '{name}']], which the library's registry does not hold: a typo, or a "
                 "name that another release (or a companion package that was not imported) registers."),
        keywords=("registered name", "acceptable choices", "registry", "unknown model"),
        patterns=(
            # allennlp / tango: a type name looked up in the Registrable
            r"(?<![\w.-])'?(?P<name>[\w.-]{1,100})'? is not a registered name for '?\w+",
            r"(?<![\w.-])[\"']?(?P<name>[\w.-]{1,100}) not in acceptable choices for [\w.]+",
            # mmcv / mmengine / detectron2's registries
            r"(?<![\w.-])[\"']?(?P<name>[\w.-]{1,100}) is not in the [\w: ]{1,60}registry",
            r"No object named '(?P<name>[\w.-]{1,100})' found in '\w+' registry",
            # timm's create_model
            r"Unknown model \((?P<name>[\w./-]{1,100})\)",
        ),
        priority=45,
        facts=((r"(?P<name>[\w.-]{1,100})'? (?:is not a registered name|not in acceptable choices|is not in the [\w: ]{1,60}"
                r"registry)", {"name": "str"}),
               (r"Unknown model \((?P<name>[\w./-]{1,100})\)", {"name": "str"}),
               (r"No object named '(?P<name>[\w.-]{1,100})' found", {"name": "str"})),
        extra={"family": "environment_version,library_api_misuse"},
        causes=("The name is misspelt, or belongs to another library's registry.",
                "Another release registers it: the configuration (or the archived model) was written for a newer or "
                "older release of the library.",
                "A companion package registers it on import (allennlp-models, a project's custom modules, mmdet's "
                "custom_imports), and the code did not import it."),
        fixes=(Fix("List the names the installed release registers",
                   "print(REGISTRY)  # the registry the message names (MODELS, META_ARCH_REGISTRY, ...) lists them"),),
        first_step="Compare the name with the names the installed release registers (the message or its registry "
        "lists them): a misspelt name, fix the configuration; a right name, install the release of the library (or "
        "the companion package, imported before use) that registers it.",
        sources=("https://docs.allennlp.org/main/api/common/registrable/",
                 "https://mmengine.readthedocs.io/en/latest/advanced_tutorials/registry.html",
                 "https://huggingface.co/docs/timm/reference/models"),
    ),
)

ENTRIES += (
    Entry(
        # ComfyUI checks a workflow's graph before it runs anything: every required input linked, every link's types
        # equal; its report names the node and the input
        slug="workflow_invalid",
        title="The workflow's graph is not valid: a required input is not linked, or a link joins different types",
        summary=("ComfyUI checked the workflow before running it and refused it[[: node {node}]]: a required input "
                 "has no link, or a link joins an output and an input of different types (often a node pack's loader "
                 "wired to another pack's node)."),
        keywords=("failed validation", "failed to validate prompt", "return type mismatch", "required input is missing"),
        patterns=(
            r"Prompt outputs failed validation",
            r"Failed to validate prompt for output \w+",
            r"Return type mismatch between linked nodes: \w+",
            r"Required input is missing: \w+",
        ),
        priority=50,
        # ComfyUI's own words around the node's lines (a bare "Required input is missing" is any validator's)
        extra={"requires": r"Prompt outputs failed validation|Failed to validate prompt|[/\\]execution\.py\b"},
        facts=((r"^\* ?(?P<node>[\w. -]{1,80} \d{1,6}):$", {"node": "str"}),
               (r"^(?P<node>\w[\w. -]{0,79}):\n- (?:Return type mismatch|Required input is missing)", {"node": "str"})),
        causes=("An output node (or any node) has an input that is required and not connected.",
                "Two linked nodes come from different node packs whose types differ in name (INSIGHTFACE against "
                "INSIGHTFACEMODEL), or a node was updated and its types changed under an old link."),
        fixes=(Fix("Link the input, or use the loader node of the same pack as the node that consumes it",
                   "# in the graph: connect an output of the named type to the named input, or bypass the node"),),
        first_step="Open the node the message names: connect an output of the right type to the input it says is "
        "missing, or replace the linked node with the loader of the same node pack (recreate and relink both nodes "
        "after an update); then queue the prompt again.",
        sources=("https://github.com/comfyanonymous/ComfyUI/blob/master/execution.py",  # validate_inputs raises them
                 "https://docs.comfy.org/"),
    ),
)

# words after which a value is a device, a tensor's or a file's, never a library's option
# (nor a kind of data or a literal a parser read: "Unknown label type: 'continuous'", "Invalid literal: abc")
_NOT_AN_OPTION = (r"(?!(?i:device|cuda|gpu|dtype|shape|size|checkpoint|file|path|key|header|magic|load|label type|"
                  r"image type|literal|value|type|format)\b)")

ENTRIES += (
    Entry(
        # a library refusing a value of one of its options ("reduction must be one of ['mean', 'sum']", "Unknown
        # metric 'acc'"): the value is misspelt or not one the call takes, or another release added or removed it
        slug="option_not_accepted",
        title="A library does not accept the value given for one of its options",
        summary=("The code or library that raised refused the value of an option[[ ({option})]]: it is not one of "
                 "the values it accepts (a misspelling, a value of another option, or one that another release added "
                 "or removed)."),
        keywords=("one of", "either", "choose from", "choose one from", "valid options", "valid choices", "valid values",
                  "available options", "available choices", "supported values", "supported options", "supported modes",
                  "valid settings", "valid names", "valid arguments",
                  "invalid ", "unknown ", "unsupported ", "unrecognized ", "unrecognised "),
        patterns=(
            r"\b(?:must|should|has to) be (?:one of|either)\b[^\n]{0,40}?(?:[\[{(:'\"`]|\b\w+ or \w+)",
            r"\b(?:[Ee]xpected one of|[Cc]hoose (?:one )?from|(?i:valid|available|supported) (?:options|choices|values|"
            r"modes|settings|names|arguments)(?: are| is|:))",
            # the value named after the words that refuse it, as the whole message ("Unknown metric 'acc'", "Invalid
            # vad_method: None")
            r"^(?:[\w.]{1,100}(?:Error|Exception): )?(?:Invalid|Unknown|Unsupported|Unrecognized|Unrecognised) "
            + _NOT_AN_OPTION + r"`?(?P<option>[\w-]{1,40}(?: [\w-]{1,40}){0,2})`?:? ['\"`]?[\w./-]{1,80}['\"`]?\.?$",
        ),
        priority=34,  # below every category that names what the value is (a registry's name, a model type, a device)
        facts=((r"(?:Invalid|Unknown|Unsupported|Unrecognized|Unrecognised) `?(?P<option>[\w-]{1,40}(?: [\w-]{1,40}){0,2})`?:? "
                r"['\"`]?[\w./-]{1,80}['\"`]?\.?$", {"option": "str"}),),
        extra={"family": "library_api_misuse,environment_version"},
        causes=("The value is misspelt, or belongs to another option (a metric's name given as a loss).",
                "Another release of the library accepts it: it was added after the installed release, or removed "
                "before it (the code follows a newer or older guide)."),
        fixes=(Fix("See the values the installed release accepts and its version",
                   "help(the_function)  # its docstring lists the choices\n"
                   "import importlib.metadata as md; print(md.version('<library>'))"),),
        first_step="Compare the value with the ones the message (or the installed release's documentation for that "
        "call) lists: fix a misspelt value or use a listed one; if the code was written for another release that "
        "lists it, install that release.",
        sources=("https://docs.python.org/3/library/exceptions.html#ValueError",
                 "https://docs.python.org/3/library/functions.html#help"),
    ),
)

ENTRIES += (
    Entry(
        # a library's small language written wrong (einops' patterns, an einsum-like equation): its identifiers, axes,
        # ellipsis or parentheses, not the tensor's shape (shape_reported answers those)
        slug="pattern_invalid",
        title="A pattern or equation string given to a library is not valid",
        summary="The library could not read the pattern (or equation) string it was given: its identifiers, axes, "
                "ellipsis or parentheses do not follow the library's rules.",
        keywords=("pattern", "expression", "equation"),
        patterns=(
            # (a line that names a shape or size is the shape's question: explain._guards)
            r"\b(?i:ellipsis|identifiers?|axis|axes|parenthes[ie]s|brackets?|arrow)\b[^\n]{0,100}?"
            r"\b(?i:pattern|expression|equation)\b",
        ),
        priority=35,  # above a value an option refuses (an unknown axis is the pattern's), below a reported shape
        causes=("An identifier on one side of the arrow only, an ellipsis on one side only, an axis used twice or "
                "never defined, unbalanced parentheses.",),
        fixes=(Fix("Write the pattern with the same identifiers (and ellipsis) on both sides",
                   "rearrange(x, 'b c h w -> b (c h w)')  # every axis named on the left appears on the right"),),
        first_step="Rewrite the pattern string the message quotes by the library's rules: each identifier and ellipsis "
        "on both sides of the arrow (or decomposed with a length given as a keyword), parentheses balanced.",
        sources=("https://einops.rocks/api/rearrange/",),
    ),
)

ENTRIES += (
    Entry(
        # scaled_dot_product_attention with its backends restricted (sdpa_kernel, the enable_* flags) to ones that
        # cannot run these inputs on this GPU: the warnings torch prints before the error say why each was refused
        slug="sdpa_no_kernel",
        title="scaled_dot_product_attention has no backend allowed that can run these inputs",
        summary=("torch's scaled_dot_product_attention found no kernel among the backends the code allows (flash, "
                 "memory-efficient, cuDNN, math) that supports these inputs on this device."),
        keywords=("no available kernel",),
        patterns=(r"No available kernel\. {1,2}Aborting execution",),
        priority=60,
        # the labels of this one message differ (library_api_misuse: a backend the code pins; other): both give the
        # step it gives, allow the math / memory-efficient backends or a dtype and GPU the pinned one supports
        extra={"family": "library_api_misuse,other"},
        causes=("The code (or a library) pins a backend with torch.nn.attention.sdpa_kernel / "
                "torch.backends.cuda.enable_*_sdp that cannot run here: flash attention on a GPU older than Ampere, in "
                "float32, or with a head size or mask it does not support.",
                "Inputs of a dtype or layout no allowed backend supports (float32 for flash, an unsupported mask)."),
        fixes=(Fix("Allow the math and memory-efficient backends too",
                   "from torch.nn.attention import sdpa_kernel, SDPBackend\n"
                   "with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):\n"
                   "    out = F.scaled_dot_product_attention(q, k, v)"),),
        first_step="Read the warnings printed just before the error (why each backend was not used), then allow the "
        "math / memory-efficient backends where the code restricts them, or run the attention in fp16/bf16 on a GPU "
        "the pinned backend supports.",
        sources=("https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html",
                 "https://pytorch.org/docs/stable/backends.html#torch.backends.cuda.sdp_kernel"),
    ),
)

ENTRIES += (
    Entry(
        # Unsloth rewrites the installed TRL / transformers sources into its compiled cache at import; a release pair
        # it was not written for gives code that does not compile (a SyntaxError in UnslothGKDTrainer.py, "non-default
        # argument follows default argument"), or a model type its compiler does not handle
        slug="unsloth_compiled_cache",
        title="Unsloth's generated code for the installed TRL / transformers does not load",
        summary=("Unsloth could not load the module it generates from the installed libraries' sources[[ "
                 "({module})]]: its release does not match the installed TRL / transformers, or a stale cache from "
                 "another release is still there."),
        keywords=("unsloth",),
        patterns=(
            r"Direct module loading failed for (?:Unsloth\w{1,80}|unsloth_compiled_module_\w{1,80})",
            r"Standard import failed for Unsloth\w{1,80}:",
            r"Unsloth: Cannot import unsloth_compiled_cache",
            r"\bSyntaxError in Unsloth\w{1,80}\.py\b",
        ),
        priority=60,
        extra={"family": "environment_version,library_api_misuse"},
        facts=((r"(?:loading failed for|import failed for|SyntaxError in) (?P<module>(?:Unsloth|unsloth_compiled_module_)"
                r"\w{1,80})", {"module": "str"}),),
        causes=("unsloth / unsloth_zoo older (or newer) than the installed TRL or transformers: the source it rewrites "
                "changed, so the generated file is not valid Python.",
                "A compiled cache (unsloth_compiled_cache) left from another release.",
                "A model type Unsloth's compiler does not handle yet."),
        fixes=(Fix("Upgrade the pair together and clear the cache",
                   "pip install --upgrade unsloth unsloth_zoo\nrm -rf unsloth_compiled_cache  # in the working directory"),
               Fix("Or pin TRL / transformers to the releases this Unsloth supports",
                   "pip install 'trl==<the release its notes name>'")),
        first_step="Upgrade unsloth and unsloth_zoo together (pip install --upgrade unsloth unsloth_zoo), delete the "
        "unsloth_compiled_cache folder, and import again; if it still fails, pin TRL / transformers to the releases "
        "that Unsloth release supports.",
        sources=("https://github.com/unslothai/unsloth#-installation-instructions",),
    ),
)
