"""Checkpoints and serialization: state_dict keys and sizes, device mapping, weights_only loading."""

from __future__ import annotations

from nbdebug.core._findings import Fix
from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES", "LOAD_STEP", "HUB_ACCESS_STEP"]

# installed libraries whose modules a pickle may name: a class or submodule missing there is the library's release
# (``api_missing``), not the project's code that saved the checkpoint
_LIBRARIES = ("ultralytics|transformers|diffusers|timm|peft|accelerate|mmcv|mmdet|mmengine|torchmetrics|"
              "pytorch_lightning|lightning")

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="size_mismatch_state_dict",
        title="Checkpoint parameter shapes differ from the model",
        summary=(
            "The checkpoint's tensors do not fit the model[[: {param} is {checkpoint_shape} in the checkpoint but "
            "{model_shape} in the model]][[ ({mismatch_count} parameters differ)]]."
        ),
        keywords=("size mismatch for", "whose dimensions in the model", "this looks incorrect"),
        patterns=(r"size mismatch for [\w.]+: copying a param (?:with shape|of torch\.Size)",
                  # accelerate's loader (device_map / low_cpu_mem_usage) meeting a weight of another shape
                  r"Trying to set a tensor of shape torch\.Size\(\[[\d, ]{1,60}\]\) in \"\w+\" \(which has shape "
                  r"torch\.Size\(\[[\d, ]{1,60}\]\)\), this looks incorrect",
                  # 0.3-era wording
                  r"While copying the parameter named \"?[\w.]+\"?, whose dimensions in the model are"),
        priority=74,
        facts=(
            (r"size mismatch for (?P<param>[\w.]+): copying a param with shape (?P<checkpoint_shape>torch\.Size\(\[[\d, ]*\]\)) "
             r"from checkpoint, the shape in current model is (?P<model_shape>torch\.Size\(\[[\d, ]*\]\))",
             {"param": "str", "checkpoint_shape": "shape", "model_shape": "shape"}),
            # before 1.1 the message said "copying a param of ... where the shape is ... in current model"
            (r"size mismatch for (?P<param>[\w.]+): copying a param of (?P<checkpoint_shape>torch\.Size\(\[[\d, ]*\]\)) "
             r"from checkpoint, where the shape is (?P<model_shape>torch\.Size\(\[[\d, ]*\]\)) in current model",
             {"param": "str", "checkpoint_shape": "shape", "model_shape": "shape"}),
        ),
        repeated_facts=((r"size mismatch for ([\w.]+):", "mismatched_params", "str_list"),),
        causes=(
            "The model was built with different hyper-parameters (hidden size, layers, vocabulary) than the checkpoint.",
            "Fine-tuning on a different number of classes: the head does not fit (expected, drop the head's weights).",
        ),
        fixes=(
            Fix("Build the model with the checkpoint's configuration (save it next to the weights)",
                "model = Net(**ckpt['config'])\nmodel.load_state_dict(ckpt['model'])"),
            Fix("Load everything except the mismatched head",
                "sd = {k: v for k, v in sd.items() if not k.startswith('head.')}\nmodel.load_state_dict(sd, strict=False)"),
        ),
        first_step="Compare the listed shapes with your model's constructor arguments; rebuild the model with the "
        "checkpoint's configuration, or drop the classifier head when fine-tuning.",
        sources=("https://pytorch.org/tutorials/beginner/saving_loading_models.html",),
    ),
    Entry(
        slug="state_dict_keys",
        title="Checkpoint keys do not match the model",
        summary=(
            "load_state_dict found[[ {missing_count} missing]][[ and {unexpected_count} unexpected]] key(s)"
            "[[ for {model_class}]].[[ {prefix_explanation}]]"
        ),
        keywords=("missing key(s)", "unexpected key(s)", "in state_dict", "following keys are missing"),
        patterns=(r"(?:Missing|Unexpected) key\(s\) in state_dict",
                  # diffusers' from_pretrained on weights of another architecture
                  r"Cannot load <class '[\w.]{1,200}'> from [^\n]{1,300} because the following keys are missing",
                  # 0.3-era wordings
                  r"unexpected key \"[\w.]+\" in state_dict",
                  r"missing keys in state_dict: "),
        priority=75,
        facts=((r"Error\(s\) in loading state_dict for (?P<model_class>\w+)", {"model_class": "str"}),),
        causes=(
            "A `module.` prefix: saved from DistributedDataParallel / DataParallel (model.state_dict() of the wrapper).",
            "An `_orig_mod.` prefix: saved from a torch.compile'd model.",
            "The model definition changed (renamed or added layers) since the checkpoint was saved.",
            "The checkpoint is a dict holding the state_dict (e.g. ckpt['model']), not the state_dict itself.",
        ),
        fixes=(
            Fix("Strip the wrapper prefix (one line)",
                "model.load_state_dict({k.removeprefix('module.'): v for k, v in sd.items()})"),
            Fix("Save unwrapped next time", "torch.save(model.module.state_dict(), path)  # DDP\n"
                "torch.save(model._orig_mod.state_dict(), path)  # torch.compile"),
            Fix("Look inside the checkpoint", "ckpt = torch.load(path, map_location='cpu')\nprint(list(ckpt)[:10])"),
        ),
        first_step="Compare the first missing and the first unexpected key: if they differ only by a prefix, "
        "strip it (one line, shown in the fixes).",
        sources=("https://pytorch.org/tutorials/beginner/saving_loading_models.html",),
    ),
    Entry(
        slug="deserialize_cuda",
        title="Checkpoint saved on a GPU, loaded without CUDA",
        summary=(
            "The file stores tensors tagged with a CUDA device, and this process has no CUDA, so torch.load "
            "cannot put them back where they were saved."
        ),
        keywords=("attempting to deserialize", "deserialize object on a cuda device", "restore data location"),
        patterns=(
            r"Attempting to deserialize (?:object )?on a CUDA device",
            r"deserialize object on a CUDA device but torch\W?cuda\.is_available\(\) is False",
            # storages tagged with a device this process does not have (mps, an unknown backend)
            r"don't know how to restore data location of [\w.]+ \(tagged with \w+\)",
            r"Attempting to deserialize object on CUDA device \d+ but torch\.cuda\.device_count\(\) is \d+",
        ),
        priority=80,
        causes=(
            "The checkpoint was saved from GPU tensors and is being loaded on a CPU-only machine or build.",
            "CUDA_VISIBLE_DEVICES hides the GPU the checkpoint refers to.",
        ),
        fixes=(
            Fix("Map the storages to CPU (or to the device you have)", "sd = torch.load(path, map_location='cpu', weights_only=True)"),
            Fix("Then move the model where you want it", "model.load_state_dict(sd)\nmodel.to(device)"),
        ),
        first_step="Pass map_location='cpu' to torch.load.",
        sources=("https://pytorch.org/docs/stable/generated/torch.load.html",),
    ),
    Entry(
        slug="weights_only_unpickling",
        title="torch.load(weights_only=True) refused a pickled object",
        summary=(
            "Since PyTorch 2.6 torch.load only unpickles tensors and plain containers by default; this checkpoint "
            "contains another Python object[[ ({global_name})]], so loading stopped before running any of its code."
        ),
        keywords=("unsupported operand", "weights only load failed", "weightsunpickler", "unsupported global", "weights_only",
                  "can only build tensor"),
        patterns=(
            r"Weights only load failed",
            r"WeightsUnpickler error",
            r"Unsupported global: GLOBAL [\w.]+",
            r"Unsupported operand \d+",
            r"Can only build Tensor, Parameter,? OrderedDict or types allowlisted",
        ),
        priority=80,
        facts=((r"Unsupported global: GLOBAL (?P<global_name>[\w.]+)", {"global_name": "str"}),),
        causes=(
            "The whole model object (torch.save(model)) or a training-state object was saved, not a state_dict.",
            "The checkpoint holds config objects (argparse.Namespace, a dataclass, numpy scalars).",
            "An old checkpoint, loaded with PyTorch >= 2.6 where weights_only=True became the default.",
        ),
        fixes=(
            Fix("Allow the specific class, if you trust the file",
                "torch.serialization.add_safe_globals([MyConfig])\nckpt = torch.load(path, weights_only=True)"),
            Fix("If you trust the file completely", "ckpt = torch.load(path, weights_only=False)  # runs pickled code"),
            Fix("Save only tensors next time", "torch.save({'model': model.state_dict(), 'step': step}, path)"),
        ),
        first_step="If the file is yours, allowlist the named class with torch.serialization.add_safe_globals; "
        "use weights_only=False only for files you fully trust.",
        sources=("https://pytorch.org/docs/stable/generated/torch.load.html",),
    ),
    Entry(
        slug="checkpoint_corrupt",
        title="The checkpoint file is missing, damaged or not what the loader expects",
        summary=("The file could not be read as a checkpoint[[ ({problem})]]: it is truncated (a download or a save "
                 "that did not finish), empty, or of another format than the loader expects."),
        keywords=("invalid magic number", "not a zip file", "storage has wrong", "unable to load weights", "error no file named", "valid model identifier", "no such file or directory", "can't load", "pytorchstreamreader", "central directory", "unexpected eof", "wrong size", "invalid load key",
                  "ran out of input", "data.pkl", "persistent id", "headertoolarge", "deserializing header", "zip archive",
                  "truncated", "storages", "errno 2", "raiifile", "fileadapter", "streamwriter",
                  "writeendoffile", "unexpected pos", "invalidheadererror", "readerror", "torch.load(",
                  "valid checkpoint at"),
        patterns=(
            r"Unable to load weights from (?:pytorch )?checkpoint file",
            # torch.load's legacy reader on a file that is not a checkpoint (or was cut)
            r"Invalid magic number; corrupt file\?",
            # a zip checkpoint without its pickle: an archive saved by something else, or cut before its index
            r"file not found: [\w.-]+/data\.pkl",
            r"Error no file named [\w.]+(?:(?:, [\w.]+)*,? or [\w.]+)? found in directory",
            r"is not a (?:valid model identifier listed on|local folder and is not a valid model identifier)",
            r"PytorchStreamReader failed (?:reading zip archive|locating file|reading file|opening archive)",
            r"failed finding central directory",
            r"unexpected EOF, expected \d+ more bytes",
            r"storage has wrong (?:byte )?size",
            r"invalid load key, '.{1,4}'",
            r"EOFError: Ran out of input",
            r"Error while deserializing header: \w+",
            r"is a zip archive \(did you mean to use torch\.jit\.load\(\)\?\)",
            r"(?i:file is not a zip file)",
            r"Unable to open file \(truncated file",
            r"A load persistent id instruction was encountered,?\s+but no persistent_load function",
            # the file is not there (torch.jit.load / the C++ reader say it their way)
            r"open file failed(?:,| because of) errno 2",
            r"\bRAIIFile\b",
            r"FileAdapter::FileAdapter",
            # the save that could not finish (a full disk, a filesystem that refused the write)
            r"PytorchStreamWriter failed writing",
            r"writeEndOfFile",
            r"unexpected pos \d+ vs \d+",
            # torch.load's legacy (tar) reader on a file that is neither a zip nor a tar checkpoint
            r"\b(?:tarfile\.)?(?:InvalidHeaderError|ReadError): (?:invalid header|bad checksum|empty header|truncated header|"
            r"file could not be opened successfully)",
            r"torch\.load\([^\n)]{0,200}\) ?-> ?\w*Error",
            # transformers' Trainer resuming from a folder that holds no checkpoint it can read
            r"Can't find a valid checkpoint at ",
        ),
        priority=79,
        facts=((r"(?P<problem>failed finding central directory|unexpected EOF, expected \d+ more bytes|storage has "
                r"wrong (?:byte )?size[^\n]{0,80}|invalid load key, '.{1,4}'|Ran out of input|HeaderTooLarge|"
                r"truncated file[^\n]{0,60})", {"problem": "str"}),),
        causes=(
            "The file is incomplete: the download or the save was interrupted (or a disk filled up).",
            "The file is not a checkpoint: an HTML error page or a Git LFS pointer saved under the checkpoint's name.",
            "A TorchScript archive loaded with torch.load (use torch.jit.load), or another format (safetensors, h5).",
            "The path does not exist where the code runs (a relative path, a different working directory).",
            "Saving failed half-way: the disk or quota is full, or the filesystem refused the write.",
        ),
        fixes=(
            Fix("Look at the file's size and first bytes", "import os; print(os.path.getsize(path))\n"
                "print(open(path, 'rb').read(64))  # b'PK' = zip checkpoint; b'version https://git-lfs' = an LFS pointer"),
            Fix("Download it again (delete the cached copy first)",
                "rm -rf ~/.cache/huggingface/hub/models--<org>--<name>  # or ~/.cache/torch/hub/checkpoints/<file>"),
        ),
        first_step="Check the file's size against the published one and its first bytes (the live panel does): a "
        "short file is an interrupted download or save; download or save it again.",
        sources=("https://pytorch.org/docs/stable/generated/torch.load.html",
                 "https://pytorch.org/docs/stable/notes/serialization.html"),
    ),
    Entry(
        slug="checkpoint_module_missing",
        title="The checkpoint needs a Python module that cannot be imported here",
        summary=("The checkpoint is a pickle of whole Python objects[[, and it needs the module '{module}']][[, and it "
                 "needs the class '{main_class}' of the script that saved it]]; that code is not importable here, so "
                 "the objects cannot be rebuilt."),
        keywords=("no module named", "can't get attribute"),
        patterns=(r"No module named '?(?!(?:" + _LIBRARIES + r")\.)(?P<module>[\w.]+)'?",
                  # not torch's or an installed library's module (that is the library's release: api_missing)
                  r"Can't get attribute '\w+' on <module '(?!__main__|torch\b|(?:" + _LIBRARIES + r")\b)[\w.]+'",
                  # a class of the script that saved the file ('__main__'): the loading script lacks it
                  r"Can't get attribute '(?P<main_class>\w+)' on <module '__main__'"),
        extra={"requires": r"serialization\.py|_pickle|pickle\.py|torch\.load\b|pickle\.load\b|unpickl|find_class|\.pth?\b|\.ckpt\b"},
        priority=62,
        facts=((r"No module named '?(?P<module>[\w.]+)'?", {"module": "str"}),
               (r"Can't get attribute '(?P<main_class>\w+)' on <module '__main__'", {"main_class": "str"})),
        causes=(
            "torch.save(model) pickled the model object, which refers to its class by module path; the module (the "
            "project's code, or an old library layout) is not importable in this environment.",
            "The class was defined in the script (or notebook) that saved the file, so the file names it as "
            "'__main__.<class>': the script that loads it does not define that class.",
            "The project's code was moved or renamed since the checkpoint was saved.",
            "The module belongs to an installed library, and the release that wrote the file had it: the file was "
            "written by another version of that library (a dataset cache, a pickled model).",
        ),
        fixes=(
            Fix("Run from the project that saved it (its modules on sys.path)", "import sys; sys.path.insert(0, '/path/to/project')"),
            Fix("Save and load a state_dict next time", "torch.save(model.state_dict(), path)\n"
                "model = Net(); model.load_state_dict(torch.load(path, weights_only=True))"),
        ),
        first_step="Find whose module it is. A module inside an installed package (its dotted name starts with the package's) means "
        "the file was written by another version of that package: install the version that wrote it, or rebuild the "
        "file with the installed one. The project's own module: run from the project that saved the checkpoint (or "
        "add it to sys.path). '__main__' is the script that saved it: define (or import) that class in the script "
        "that loads the file, before torch.load. Then save a state_dict so the file no longer needs it.",
        sources=("https://pytorch.org/tutorials/beginner/saving_loading_models.html",
                 "https://docs.python.org/3/library/pickle.html#what-can-be-pickled-and-unpickled"),
    ),
)

# The first step of ``checkpoint_load_failed``, filled with the loader's frame and the user's call into it.
# checkpoint_load_failed's first step when the Hub refused the download (a gated or private model, a wrong name)
HUB_ACCESS_STEP = ("The model's files did not come from the Hub: check the name, make sure no local folder of the same "
                   "name shadows the Hub id, accept the model's license on its page if it is gated and log in with "
                   "huggingface-cli login (or pass token=); on a machine that cannot reach huggingface.co, download "
                   "the files elsewhere and load them from their folder.")
LOAD_STEP = ("Check what {call} asked {loader} to read: that the path (or model name) exists from where the code runs, "
             "that the folder holds every file the loader needs (config.json, the weights, the tokenizer's files) and "
             "that each file is complete (its size against the published one); download or save it again if not. "
             "A complete file that still fails was written by another release of the library that saved it.")

ENTRIES += (
    Entry(
        slug="checkpoint_load_failed",
        title="Loading a checkpoint or a pretrained model's files failed",
        summary=("Loading a model's files failed[[: {exc_type} was raised while {loader} was reading them]][[ "
                 "({where})]][[, called at {user_where}]]: the file or folder is missing, incomplete or not what the loader expects."),
        keywords=("checkpoint", "weights", "model file", "can't load", "gated", "repositorynotfound"),
        patterns=(
            # a program's own notice that the checkpoint is not where it looks
            r"(?i:checkpoint|pretrained weights?|weights? file|model file)[^\n]{0,60}?(?:does ?n[o']t exist|not "
            r"exist(?:ed|s)?\b|(?:was |were )?not found|is missing)",
            # transformers / diffusers finding no files for a model name (a local folder that shadows it, a gated or
            # private model, a typo), and the Hub refusing the download
            r"Can't load (?:the )?(?:tokenizer|model|config(?:uration)?|feature extractor|image processor|processor) "
            r"for '[^'\n]{1,200}'",
            r"\b(?:GatedRepoError|RepositoryNotFoundError)\b|You are trying to access a gated repo|Cannot access gated repo",
        ),
        priority=30,
        causes=("The path or model name does not exist where the code runs (a relative path, another working "
                "directory, a typo, a gated or private model without access).",
                "The folder lacks a file the loader needs, or a file is incomplete (an interrupted download or save).",
                "The file was written by another release of the library (or another library) than the one reading it."),
        fixes=(Fix("Look at the files the loader was given", "import os\nprint(os.path.abspath(path), os.path.exists(path))"
                   "\nprint(os.listdir(path) if os.path.isdir(path) else os.path.getsize(path))"),),
        first_step="Check the path or model name the loader was given: that it exists from where the code runs, holds "
        "every file the loader needs, and that each file is complete; download or save it again if not.",
        sources=("https://pytorch.org/docs/stable/generated/torch.load.html",
                 "https://huggingface.co/docs/transformers/main_classes/model#transformers.PreTrainedModel.from_pretrained"),
        extra={"family": "checkpoint_file"},
    ),
)

ENTRIES += (
    Entry(
        # a loader that reads the release a file was saved with and refuses another (Lightning, a model zoo, a
        # library's own format): the file is fine, the installed release is not the one that wrote it
        slug="checkpoint_other_release",
        title="The file was saved by another release of the library than the one reading it",
        summary=("The loader says the file was written by another release of the library[[ ({saved_with})]] than the "
                 "one installed, and refuses it."),
        keywords=("saved with", "saved by", "saved using", "trained with", "trained by", "trained using", "created with",
                  "created by", "created using", "written with", "written by", "written using", "serialized with",
                  "serialized by", "serialized using", "exported with", "exported by", "exported using"),
        patterns=(
            # (a checkpoint's, a model's, a file's: "the image was created with a newer version of Pillow" is no load)
            r"(?i:checkpoint|model|file|weights|state|index|archive|pickle|snapshot|dump)[^\n]{0,120}?\b(?i:saved|trained|"
            r"created|written|serialized|exported) (?:with|by|using) (?:a |an )?(?:newer|older|later|earlier|different) (?:version|release)\b",
            r"\b(?i:saved|trained|created|written|serialized) (?:with|by|using) [A-Za-z][\w.-]{0,40} v?\d{1,4}\.\d{1,4}"
            r"[\w.+-]{0,20},? but (?:you are running|you're running|the installed|installed|this is|the current)",
        ),
        priority=47,
        facts=((r"(?i:saved|trained|created|written|serialized) (?:with|by|using) (?P<saved_with>[A-Za-z][\w.-]{0,40} "
                r"v?\d{1,4}\.\d{1,4}[\w.+-]{0,20})", {"saved_with": "str"}),),
        extra={"family": "checkpoint_file,environment_version"},
        causes=("The checkpoint was saved by a newer release (a format this one does not read), or by an older one "
                "whose format this release dropped.",),
        fixes=(Fix("See the installed release, then install the one the file was saved with",
                   "import importlib.metadata as md; print(md.version('<library>'))\n%pip install '<library>==<saved>'"),
               Fix("Or load it with that release once and save it again with this one",
                   "# in an environment with the saving release: load, then save (state_dict) for the new one")),
        first_step="Install the release of the library the file was saved with (the message names it), or load the "
        "file once with that release and save it again in a form the installed one reads; then load it again.",
        sources=("https://lightning.ai/docs/pytorch/stable/common/checkpointing_basic.html",
                 "https://pytorch.org/docs/stable/notes/serialization.html"),
    ),
)
