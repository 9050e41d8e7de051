"""The user's own Python errors in training code.

A call that does not fit a signature, a key a batch lacks, an attribute an output does not have.  The live checks
(``nbdebug.core.explain._live``) show the real signature, the real keys and the real fields; without a live session
the texts say what to print.
"""

from __future__ import annotations

from nbdebug.core._findings import Fix
from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES", "USER_ERROR_STEPS", "RELATIVE_IMPORT_CELL", "RELATIVE_IMPORT_CELL_STEP", "RELATIVE_IMPORT_SCRIPT"]

_CALLS = "https://docs.python.org/3/tutorial/controlflow.html#more-on-defining-functions"
_MODULE = "https://pytorch.org/docs/stable/generated/torch.nn.Module.html"

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="call_signature",
        title="A call does not fit the function's signature",
        summary=("[[{function}() ]]was called with arguments it does not take[[ ({problem})]]: the caller and the "
                 "function disagree, usually because one of them comes from another version of the code or library."),
        keywords=("multiple values for keyword", "unexpected keyword argument", "required positional argument", "positional argument",
                  "multiple values for argument", "required keyword-only argument", "but instead found type"),
        patterns=(
            r"got an unexpected keyword argument '?\w+'?",
            r"missing \d+ required (?:positional|keyword-only) arguments?: '\w+'",
            r"takes (?:from \d+ to )?\d+ positional arguments? but \d+ (?:were|was) given",
            r"got multiple values for (?:keyword )?argument '\w+'",
            # the schema check of a TorchScript function or a torch.ops operator (torchaudio_sox::load_audio_file)
            r"Expected a value of type '[^'\n]{1,100}' for argument '\w+' but instead found type '[^'\n]{1,100}'",
        ),
        exception_types=(),
        priority=42,
        facts=(
            (r"(?P<function>[\w.]{1,120})\(\) (?P<problem>got an unexpected keyword argument '?\w+'?|missing \d+ required "
             r"[\w-]+ arguments?: [^\n]{1,200}|takes [^\n]{1,80} given|got multiple values for [^\n]{1,80})",
             {"function": "str", "problem": "str"}),
        ),
        causes=(
            "The model's forward (or a library function) takes other arguments than the caller passes: e.g. a "
            "Trainer or pipeline passing labels=/attention_mask= to a model that does not accept them.",
            "The code was written for another version of the library, where the function took this argument.",
            "A batch dict unpacked into the model (model(**batch)) holding keys the model does not take.",
        ),
        fixes=(
            Fix("Look at what the function takes", "import inspect\nprint(inspect.signature(model.forward))"),
            Fix("Pass only what the model takes",
                "import inspect\nallowed = inspect.signature(model.forward).parameters\n"
                "out = model(**{k: v for k, v in batch.items() if k in allowed})"),
        ),
        first_step="Compare the call with the function's signature (the live panel shows it): rename or drop the "
        "argument, or use the library version the code was written for.",
        sources=(_CALLS, _MODULE),
    ),
    Entry(
        slug="missing_key",
        title="A dict (a batch, a checkpoint, a config) has no such key",
        summary="The code reads a key[[ {key}]] that the dict does not hold: the producer and the reader disagree on names.",
        keywords=("keyerror",),
        patterns=(
            r"(?m)^KeyError: ?(?:'[^'\n]{1,200}'|\"[^\"\n]{1,200}\"|\d{1,12})[ \t]*$",),
        exception_types=("KeyError",),
        priority=30,
        facts=((r"(?m)^KeyError: ?(?P<key>'[^'\n]{1,200}'|\"[^\"\n]{1,200}\"|\d{1,12})", {"key": "str"}),),
        causes=(
            "A batch from the Dataset / collate function uses other key names than the training step reads.",
            "A checkpoint dict saved with other keys ('state_dict' vs 'model', a bare state_dict vs a wrapper dict).",
            "A config or column renamed between library versions.",
        ),
        fixes=(Fix("Print the keys the dict really has", "print(sorted(batch.keys()))  # or ckpt.keys()"),),
        first_step="Print the dict's keys at the failing line (the live panel lists them) and use the name it really "
        "holds, or make the producer emit the name the reader expects.",
        sources=("https://docs.python.org/3/library/exceptions.html#KeyError",
                 "https://pytorch.org/tutorials/beginner/saving_loading_models.html"),
    ),
    Entry(
        slug="wrong_object_attribute",
        title="An object is not what the code expects (no such attribute)",
        # (its messages are not all attribute reads: an operand, a len(), an unpack count, a call of a value)
        summary=("The code uses a value as something it is not[[: it reads .{attr} from a {type_name}]]: the value is "
                 "of another kind, or holds another number of items, than the code expects (a tuple instead of a "
                 "model output, None instead of a tensor, two outputs where the line unpacks three, ...)."),
        keywords=("unsupported operand", "can only concatenate", "cannot be interpreted as an integer", "has no len()", "object has no attribute", "object is not", "values to unpack", "is not iterable", "has no attribute",
                  "must derive from baseexception",
                  "cannot assign"),
        patterns=(
            r"unsupported operand type\(s\) for",
            r"can only concatenate \w+ \(not \"\w+\"\) to \w+",
            r"'\w{1,80}' object cannot be interpreted as an integer",
            r"object of type '\w{1,80}' has no len\(\)",
            r"'\w{1,80}' object has no attribute '\w+'",
            # the same on a class (an enum member a release renamed: Image.ANTIALIAS), or a value tested with `in`
            r"type object '\w{1,80}' has no attribute '\w+'",
            r"argument of type '\w{1,80}' is not iterable",
                  r"'\w{1,80}' object is not (?:iterable|subscriptable|callable)",
                  r"(?:too many|not enough) values to unpack \(expected \d+",
                  # a raise of a value that is no exception (a string, None, a class that is not one)
                  r"exceptions must derive from BaseException",
                  # nn.Module refusing a value of another kind for a registered sub-module or parameter (a class
                  # given instead of an instance, a tensor for a Parameter)
                  r"cannot assign '[^'\n]{1,200}' as (?:child module|parameter|buffer) '\w+'"),
        priority=40,
        facts=((r"'(?P<type_name>\w{1,80})' object has no attribute '(?P<attr>\w{1,80})'",
                {"type_name": "str", "attr": "str"}),),
        causes=(
            "A model returns a tuple (return_dict=False, an older library version, torch.jit) where the code expects "
            "an output object with named fields (outputs.logits).",
            "A function returned None (a forgotten return, or an in-place method's result).",
            "The object comes from another version of the library, where the attribute had another name.",
        ),
        fixes=(
            Fix("See what the object is", "print(type(out)); print(getattr(out, 'keys', lambda: dir(out))())"),
            Fix("Index a tuple output, or ask for a dict", "logits = out[0]  # or model(..., return_dict=True).logits"),
        ),
        first_step="Print type() of the value at the failing line, and len() of one the line unpacks (the live panel "
        "shows its fields), and use it as what it is: read the attribute it really has, unpack as many items as it "
        "holds, or fix the function that returned it.",
        sources=("https://docs.python.org/3/library/exceptions.html#AttributeError",
                 "https://huggingface.co/docs/transformers/main_classes/output"),
    ),
    Entry(
        slug="replica_error",
        title="An error inside a DataParallel replica",
        summary="nn.DataParallel re-raised an error that happened inside one replica of the model[[ (replica {replica})]]; "
                "the original error is in the text below that line.",
        keywords=("in replica",),
        patterns=(r"Caught \w+ in replica \d+ on device \d+",),
        priority=22,
        wrapper=True,
        facts=((r"Caught \w+ in replica (?P<replica>\d+) on device", {"replica": "int"}),),
        causes=("The error is the model's own; DataParallel only reports it from a worker thread.",),
        fixes=(Fix("Reproduce without DataParallel: the same error, with a direct traceback",
                   "out = model.module(x[:2].to('cuda:0'))"),),
        first_step="Read the original traceback printed after 'Original Traceback' and debug it on one GPU without "
        "DataParallel (model.module).",
        sources=("https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html",),
    ),
)

# The family-level answer for a Python error raised in the user's own file that no category above names
# (``nbdebug.core.explain._family``): one first step per exception class, naming the line the traceback shows.
USER_ERROR_STEPS: dict[str, str] = {
    "NameError": "At {where}, a name is used that is not defined on this path: find where it should be assigned "
                 "(or imported) before that line, and make that happen on every path that reaches it.",
    "UnboundLocalError": "At {where}, a local variable is read before this path assigned it: the branch or try block "
                         "that should set it did not run (often an except that swallowed the real error); let that "
                         "earlier error raise, or assign the variable on every path.",
    "KeyError": "Print the dict's keys just before {where} (print(list(d.keys()))) and use the key it really holds, "
                "or make the code that builds the dict emit the key this line reads.",
    "AttributeError": "Print type() of the object used at {where} and its fields (print(type(obj), dir(obj))) just "
                      "before that line: it is of another kind than the code expects, so fix the code that produced "
                      "it or read the attribute it has.",
    "TypeError": "Look at the call at {where}: print the types of the values it passes and the signature of what it "
                 "calls (inspect.signature), and pass what that function takes.",
    "IndexError": "At {where}, print len() of the sequence being indexed and the index used: the code assumes more "
                  "items than there are (an empty list, an off-by-one, a shorter split).",
    "ValueError": "Print the values used at {where}: the message names the one that the code (or the function it "
                  "calls there) rejects; fix the value where it is made.",
    "ZeroDivisionError": "A divisor at {where} is zero: print it (usually a count or length of 0: an empty dataset, a "
                         "batch count, a loader with drop_last on too few items).",
    "AssertionError": "An assert at {where} failed: print both sides of its condition just before it, and fix the "
                      "value that breaks the assumption.",
    "UnicodeDecodeError": "At {where}, bytes are decoded with another encoding than they were written in (a Windows "
                          "code page, Latin-1): pass the right encoding, or errors='replace' for text only shown, "
                          "or run Python in UTF-8 mode (PYTHONUTF8=1).",
    "UnicodeEncodeError": "At {where}, text is written to a stream or file whose encoding cannot hold it (a Windows "
                          "console's code page): open the file with encoding='utf-8', or set PYTHONIOENCODING=utf-8.",
    "SyntaxError": "Fix the syntax at {where} (the caret shows where Python stopped reading).",
    "IndentationError": "Fix the indentation at {where} (mixed tabs and spaces, or a block left empty).",
    # any other class, raised by the code's own ``raise`` statement: a check the project wrote
    "raise": "The code's own check at {where} raised this: read the condition just above that line (the message "
             "says what it expected) and fix the value, argument or configuration it rejects.",
}

ENTRIES += (
    Entry(
        slug="user_code_error",
        title="A Python error in the code's own file",
        summary=("{exc_type} was raised in the code's own file[[ ({where})]], not inside torch or a library: the "
                 "cause is in that code, at or before that line."),
        causes=("A value of another kind, size or content than this line assumes, made earlier in the same code.",
                "Code paths that skip an assignment or a key the line relies on."),
        fixes=(Fix("Stop at the failing line and look at the values", "%debug   # in the notebook, right after the error"),),
        first_step="Look at the line the traceback's last frame shows in the code's own file, and print the values "
        "it uses.",
        sources=("https://docs.python.org/3/library/exceptions.html",
                 "https://docs.python.org/3/library/pdb.html"),
        extra={"family": "user_code_python"},
    ),
)

# How ``relative_import_script`` names what ran the code (``runner``) and the first step for a notebook cell.
RELATIVE_IMPORT_SCRIPT = "a script (python path/to/file.py)"
RELATIVE_IMPORT_CELL = "a notebook cell (or an interactive prompt), which belongs to no package"
RELATIVE_IMPORT_CELL_STEP = ("A notebook cell belongs to no package, so '.' names nothing: import absolutely "
                             "(from pkg.utils import load_data instead of from .utils import load_data), with the folder "
                             "that holds pkg on sys.path (sys.path.insert(0, '/path/above/pkg')).")

ENTRIES += (
    Entry(
        slug="relative_import_script",
        title="A relative import ran outside its package (a script or a notebook cell)",
        summary=("The code uses a relative import (from .x import y), which works only inside a package[[, and it "
                 "was run as {runner}]], so '.' names no parent package."),
        keywords=("attempted relative import",),
        patterns=(r"attempted relative import with no known parent package",),
        priority=60,
        extra={"family": "user_code_python"},
        causes=("python path/to/pkg/file.py runs the file as __main__, not as pkg.file, so '.' names no package.",
                "A notebook cell (or a script) that copied a package's module, with its relative imports."),
        fixes=(Fix("Import absolutely", "from pkg.data import load   # instead of: from .data import load"),
               Fix("A script: run it as a module from the folder above the package",
                   "cd /path/above/pkg && python -m pkg.train")),
        first_step="Run the file as a module from the folder that holds its package (python -m pkg.file), or change "
        "its relative imports to absolute ones.",
        sources=("https://docs.python.org/3/reference/import.html#package-relative-imports",
                 "https://docs.python.org/3/using/cmdline.html#cmdoption-m"),
    ),
)

ENTRIES += (
    Entry(
        # torch's argument parser, its tensor-list checks, and any library's own check that an input is a tensor: the
        # value is a tuple (a model's output), a list, an array or None where one tensor is expected
        slug="not_a_tensor",
        title="A value that is not a tensor was given where a tensor is expected",
        summary=("An operation or a library expected a tensor and got another kind of value[[ ({got})]]: a tuple "
                 "(a model's output, a batch of several fields), a list, a NumPy array or None."),
        keywords=("must be tensor", "expected tensor as element", "be a torch.tensor", "be torch.tensor",
                  "not a torch.tensor", "not torch.tensor", "not a tensor", "not tensor", "be a tensor", "be tensor",
                  "invalid combination of arguments"),
        patterns=(
            r"\bargument '\w+' \(position \d+\) must be Tensor, not (?P<got>[\w.]+)",
            r"\bexpected Tensor as element \d+ in argument \d+, but got (?!Tensor\b)[\w.]+",
            r"\b(?i:input|inputs|x|value|argument|tensor)\w{0,20} (?:must|should) be (?:a )?(?:torch\.)?Tensor\b(?! (?:of|with)\b)",
            r"\b(?i:input|inputs|x|value|argument)\w{0,20} is not (?:a )?(?:torch\.)?Tensor\b(?! (?:of|with)\b)",
            r"\b(?i:inputs?|x|value) (?:must|should) be a tensor or a (?:tuple|list) of tensors\b",
            # torch's old parser, when the first argument given is no tensor at all
            r"received an invalid combination of arguments - got \((?:list|tuple|NoneType|numpy\.ndarray|str|dict)\b",
        ),
        priority=38,
        facts=((r"must be Tensor, not (?P<got>[\w.]+)", {"got": "str"}),
               (r"as element \d+ in argument \d+, but got (?P<got>[\w.]+)", {"got": "str"}),
               (r"must be a (?:torch\.)?Tensor,? (?:but )?got (?P<got>[\w.]+)", {"got": "str"})),
        extra={"family": "user_code_python,library_api_misuse"},
        causes=("A model's output (a tuple, a ModelOutput) passed on whole instead of the tensor in it.",
                "A list of tensors or a NumPy array where one tensor is expected (a batch not collated or stacked).",
                "A function that returned None, or a batch of several fields passed as one."),
        fixes=(Fix("See what the value is, then take the tensor out of it",
                   "print(type(x))\nx = out[0]            # a tuple output\nx = out.logits        # a ModelOutput\n"
                   "x = torch.stack(xs)    # a list of equal-shaped tensors\nx = torch.as_tensor(a)  # a NumPy array"),),
        first_step="Print type() of the value passed at the failing call (the live panel shows it) and pass the tensor "
        "it holds: index a tuple or model output, stack a list, convert an array with torch.as_tensor, or fix the "
        "function that returned None.",
        sources=("https://pytorch.org/docs/stable/tensors.html",
                 "https://huggingface.co/docs/transformers/main_classes/output"),
    ),
)

ENTRIES += (
    Entry(
        # bash / zsh / dash running an option or an assignment as a command: the line before it in the script ended
        # without its continuation backslash (or with a space after it), so the launcher never got the arguments
        slug="shell_argument_run",
        title="A shell script ran one of its arguments as a command (a broken line continuation)",
        summary=("The shell tried to run[[ '{word}']] as a program, but it is an argument (an option or a "
                 "name=value setting) of the command on the line before: that line does not end with a bare "
                 "backslash, so the command ended there and its arguments became a command of their own."),
        keywords=("command not found", ": not found", ":not found"),
        patterns=(
            # bash: "train.sh: line 15: data.max_length=2048: command not found"; "--lr: command not found" (a name
            # without '.' or '-' before '=' is an assignment at a line's start, never a command: not this question)
            r"(?:^|: )(?P<word>-{1,2}[A-Za-z][\w.-]{0,80}(?:=[^\s:]{0,200})?|[A-Za-z_]\w{0,80}[.-][\w.-]{0,80}=[^\s:]{0,200})"
            r": command not found",
            # zsh names the word after the message; dash (/bin/sh) as "sh: 15: --lr: not found"
            r"\bcommand not found: (?P<zword>-{1,2}[A-Za-z][\w.-]{0,80}|[A-Za-z_]\w{0,80}[.-][\w.-]{0,80}=\S{0,200})",
            r"\bsh: ?\d{1,6}: ?(?P<dword>-{1,2}[A-Za-z][\w.-]{0,80}|[A-Za-z_]\w{0,80}[.-][\w.-]{0,80}=[^\s:]{0,200}): ?not found",
        ),
        # below package_missing: a Python error printed before it (the command above failing) keeps its own answer;
        # package_missing gives way on this line (explain._guards)
        priority=43,
        facts=((r"(?P<word>-{1,2}[A-Za-z][\w.-]{0,80}(?:=[^\s:]{0,200})?|[A-Za-z_]\w{0,80}[.-][\w.-]{0,80}=[^\s:]{0,200})"
                r"(?=: command not found|: ?not found)", {"word": "str"}),
               (r"\bline (?P<line>\d{1,6}): ", {"line": "int"})),
        extra={"family": "user_code_python"},
        causes=("The line before ends with a backslash followed by a space or a tab (or Windows' \\r line endings), "
                "so the backslash escapes that character instead of the line break.",
                "The line before has no backslash at all, or a comment line sits inside the continued command."),
        fixes=(Fix("Find backslashes followed by spaces, and Windows line endings, in the script",
                   "grep -nE '\\\\[[:space:]]+$' train.sh   # a backslash with something after it\n"
                   "sed -i 's/\\r$//' train.sh              # CRLF line endings from Windows"),),
        first_step="Open the script at the line before the one the shell names and make it end with a bare backslash "
        "(nothing after it, no CRLF ending), so the option is passed to the command above instead of run alone.",
        sources=("https://man7.org/linux/man-pages/man1/bash.1.html",),
    ),
    Entry(
        # placed by the traceback's structure (explain._source_line.loop_items): the unpacking error is raised on a
        # ``for`` line whose target is several names (or a batch's assignment), so the items have another structure
        slug="loop_items_unpack",
        title="Each item of a loop (a batch, a dict's key, a zip's tuple) is unpacked into more or fewer names than it holds",
        summary=("The code[[ at {where}]] unpacks the items it iterates[[ ({iterable})]] into several names, but the "
                 "items hold another number of values: a DataLoader's batches (what the Dataset's __getitem__ "
                 "returns, collated), a dict's keys, or a zip of other lengths."),
        extra={"family": "dataloader,user_code_python"},
        causes=("The Dataset's __getitem__ returns another number of fields than the loop names (a dict, a single "
                "tensor whose first dimension is then unpacked, or a third field such as a path or an index).",
                "The loop iterates a dict (its keys) where it meant .items(), or forgot enumerate()'s index."),
        fixes=(Fix("Look at one item of what the loop iterates",
                   "item = next(iter(loader))  # loader: what the failing line iterates\n"
                   "print(type(item), len(item) if hasattr(item, '__len__') else '')"),),
        first_step="Take one item of what the loop iterates (next(iter(loader))), print its type and length, and make "
        "the Dataset's __getitem__ return exactly the fields the loop unpacks (or unpack what it returns).",
        sources=("https://pytorch.org/docs/stable/data.html#dataset-types",
                 "https://docs.python.org/3/tutorial/datastructures.html#tuples-and-sequences"),
    ),
    Entry(
        # placed by the traceback's structure (explain._source_line.command_line_key): a KeyError on a line that looks
        # a table of supported values up by a command-line option's value or a variable (MODEL_CLASSES[args.model_type])
        slug="script_choice_missing",
        title="The code's table of supported values has no entry for the value given",
        summary=("The code looks the value[[ of {option}]] up in its table of the values it supports[[ ({table})]], "
                 "and the value given[[ ({key})]] is not in it: a value this copy of the code does not support "
                 "(misspelt, or added in another release of the script and its library)."),
        extra={"family": "user_code_python,environment_version"},
        causes=("The script (an example copied from a library's repository) comes from another release than the "
                "installed library: the value was added in a later one.",
                "The value is misspelt, or belongs to another option."),
        fixes=(Fix("See which values the script's table holds", "print(sorted(TABLE))  # TABLE: the table on the failing line"),),
        first_step="Print the keys of the table on the failing line and compare them with the value given (on the "
        "command line, or in the config): use a listed one, or take the script from the same release as the installed library (the "
        "release that added the value).",
        sources=("https://docs.python.org/3/library/argparse.html#choices",
                 "https://docs.python.org/3/library/exceptions.html#KeyError"),
    ),
)

ENTRIES += (
    Entry(
        # a KeyError whose key Python prints as a tensor: tensors hash by identity, so a dict keyed by tensors (a
        # parameter -> name map, an optimizer's state) finds only the very object it was built with
        slug="tensor_key_missing",
        title="A dict keyed by tensors (or parameters) does not hold this one",
        summary=("The code looked a tensor up in a dict (or an optimizer's state) that does not hold it: tensors are "
                 "dict keys by identity, not by value, so only the very object the dict was built with is found."),
        keywords=("keyerror",),
        # (also the tensor's str() used as the key: "tensor(159, device='cuda:0')")
        patterns=(r"(?m)^KeyError: ?(?:Parameter containing:|[\"']?tensor\()",),
        priority=32,  # above missing_key: the key is no name at all
        extra={"family": "user_code_python,library_api_misuse"},
        facts=((r"(?m)^KeyError: ?[\"']?(?P<key_kind>Parameter containing|tensor)", {"key_kind": "str"}),),
        causes=(
            "A dict (or an optimizer's state) built from one set of parameter objects and looked up with others: the "
            "model was wrapped, copied, re-created or moved to another device (accelerate / DeepSpeed / DDP prepare, "
            "deepcopy, a reloaded model) after the dict or optimizer was made.",
            "A tensor used where its value was meant (a label tensor as a class-name key): the lookup compares "
            "objects, not numbers.",
        ),
        fixes=(
            Fix("Key by name, not by object", "names = {n: p for n, p in model.named_parameters()}  # and look up by n"),
            Fix("Look a value up by its number", "label = classes[int(y)]  # or y.item()"),
            Fix("Build the optimizer (or the dict) from the model as the loop uses it",
                "model = accelerator.prepare(model)  # wrap first\noptimizer = torch.optim.AdamW(model.parameters())"),
        ),
        first_step="Find the dict the traceback's last frame indexes: for a tensor's value use int(t) / t.item() as the "
        "key; for parameters, build the dict (or the optimizer) from the same model object the loop uses, after "
        "wrapping or copying it, or key it by parameter name.",
        sources=("https://docs.python.org/3/library/exceptions.html#KeyError",
                 "https://pytorch.org/docs/stable/optim.html"),
    ),
)

ENTRIES += (
    Entry(
        # argparse run inside a notebook: sys.argv is the kernel's own command line ("-f .../kernel-....json"), so the
        # script's options are missing or the kernel's are unrecognised; IPython shows the exit as "SystemExit: 2"
        slug="argparse_in_notebook",
        title="A script's argument parser ran inside the notebook and read the kernel's command line",
        summary=("argparse parsed sys.argv, which in a notebook is the kernel's own command line[[ ({what})]]: the "
                 "script's options are not there, so the parser printed a usage error and exited with status 2."),
        keywords=("systemexit: 2", "kernel-", "--f=", "ipykernel_launcher", "colab_kernel_launcher", "xpython_launcher"),
        patterns=(
            # IPython's notice of that exit (its own line, then the status)
            r"(?m)^SystemExit: 2[ \t]*$",
            # the parser's error naming the kernel's connection file, or its program name as the kernel's launcher
            r"unrecognized arguments: [^\n]{0,400}?(?:kernel-[\w-]{1,120}|--f=[^\s]{1,300})\.json",
            r"(?m)^(?:ipykernel_launcher|colab_kernel_launcher|xpython_launcher)(?:\.py)?: error: ",
        ),
        priority=40,  # above cli_usage: the tool that rejected its arguments is the notebook's parser
        extra={"family": "user_code_python"},
        facts=((r"(?P<what>unrecognized arguments: [^\n]{1,300}|the following arguments are required: [^\n]{1,200})",
                {"what": "str"}),),
        causes=("Code written for the command line (parser.parse_args()) pasted or imported into a notebook cell: "
                "the kernel was started with its own arguments, not the script's.",),
        fixes=(
            Fix("Give the parser the options explicitly", "args = parser.parse_args(['--dataroot', 'data/', '--epochs', "
                "'10'])  # or: parser.parse_args(args=[]) for the defaults"),
            Fix("Or run the script as a program from the notebook", "!python train.py --dataroot data/ --epochs 10"),
        ),
        first_step="In the notebook, call parser.parse_args([...]) with the options as a list (parse_args(args=[]) for "
        "the defaults, or parse_known_args()) instead of reading sys.argv, or run the script with !python script.py "
        "and its options.",
        sources=("https://docs.python.org/3/library/argparse.html#argparse.ArgumentParser.parse_args",
                 "https://docs.python.org/3/library/argparse.html#partial-parsing"),
    ),
    Entry(
        # a file the code opens by a path that does not exist from where it runs: a relative path resolved against
        # another working directory, a file not downloaded or not yet written, a typo (a model file's own loader frames
        # are checkpoint_load_failed's: _guards keeps them there)
        slug="file_not_found",
        title="The code opens a file that does not exist at that path",
        summary=("The code asked for a file[[ '{path}']] that does not exist at that path from where it runs: a "
                 "relative path is resolved against the working directory, not the script's folder."),
        keywords=("no such file or directory", "can't open file"),
        patterns=(
            r"(?:FileNotFoundError|IOError|OSError): \[Errno 2\] No such file or directory: '[^'\n]{1,500}'",
            # python started on a script path that does not exist
            r"can't open file '[^'\n]{1,500}': \[Errno 2\] No such file or directory",
        ),
        priority=28,  # below every category that knows the file (a checkpoint, a program, a library's own files)
        extra={"family": "user_code_python,dataloader"},
        facts=((r"No such file or directory: '(?P<path>[^'\n]{1,500})'", {"path": "str"}),
               (r"can't open file '(?P<path>[^'\n]{1,500})'", {"path": "str"})),
        causes=("A relative path, resolved against the working directory (where the notebook server or the script was "
                "started), not the folder of the file that names it.",
                "The file was never downloaded, generated or copied there (a dataset, a config, an input image), or "
                "the path has a typo."),
        fixes=(Fix("See where the code looks", "import os\nprint(os.getcwd())\nprint(os.path.exists('<the path>'))"),
               Fix("Name the file from the script's own folder",
                   "from pathlib import Path\npath = Path(__file__).parent / 'configs' / 'config.yaml'")),
        first_step="Print os.getcwd() and os.path.exists(path) where the code opens the file: run from the folder the "
        "relative path expects (or make the path absolute), or put the file (dataset, config, input) there first.",
        sources=("https://docs.python.org/3/library/exceptions.html#FileNotFoundError",
                 "https://docs.python.org/3/library/os.html#os.getcwd"),
    ),
)

ENTRIES += (
    Entry(
        # next() on an iterator with nothing left: a DataLoader / dataset that yielded no batch (no files found, a
        # batch larger than the data with drop_last=True), or an iterator used up by an earlier loop
        slug="iterator_empty",
        title="next() found the iterator (a DataLoader, a dataset) empty",
        summary=("next() was called on an iterator that had nothing (left) to give, so Python raised StopIteration: "
                 "the data it iterates is empty, or an earlier loop used it up."),
        keywords=("stopiteration",),
        patterns=(r"(?m)^(?:builtins\.)?StopIteration:?[ \t]*$",),
        priority=24,
        extra={"family": "dataloader,user_code_python"},
        causes=("The dataset is empty: its folder or file list matched nothing, or a filter removed every sample.",
                "drop_last=True with a batch size larger than the dataset, so the loader yields no batch.",
                "An iterator (iter(loader), a generator) that an earlier loop already exhausted."),
        fixes=(Fix("Check what the loader holds", "print(len(dataset), len(loader))  # 0 batches: nothing to iterate"),
               Fix("Take a fresh iterator for each pass", "batch = next(iter(loader))  # not one iterator kept across "
                   "epochs")),
        first_step="Print len(dataset) and len(loader) where next() is called: 0 means the data was not found or the "
        "batch is larger than the dataset with drop_last=True; otherwise make a fresh iter() for each pass.",
        sources=("https://docs.python.org/3/library/exceptions.html#StopIteration",
                 "https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader"),
    ),
)

ENTRIES += (
    Entry(
        # worker processes started with 'spawn' (Windows, macOS) re-run the main script; without the
        # if __name__ == '__main__': guard each worker tries to start workers of its own and multiprocessing refuses
        slug="spawn_main_guard",
        title="Worker processes started before the script's main guard (spawn re-runs the script)",
        summary=("A worker process (a DataLoader with num_workers > 0, a Pool) was started from code that runs at "
                 "import time: with the 'spawn' start method (Windows, macOS) each worker re-imports the main script, "
                 "reaches the same line and would start workers again, so Python stops it."),
        keywords=("bootstrapping phase",),
        patterns=(r"An attempt has been made to start a new process before the\s+current process has finished its\s+"
                  r"bootstrapping phase",),
        priority=62,
        extra={"family": "dataloader,user_code_python"},
        causes=("A training script whose loop (and its DataLoader with num_workers > 0) runs at module level, not "
                "under if __name__ == '__main__':, run on Windows or macOS.",),
        fixes=(Fix("Put the script's work under the main guard", "def main():\n    loader = DataLoader(ds, batch_size=32, "
                   "num_workers=4)\n    train(loader)\n\nif __name__ == '__main__':\n    main()"),
               Fix("Or load in the main process", "DataLoader(ds, batch_size=32, num_workers=0)")),
        first_step="Move the script's top-level work (building the DataLoader and the training loop) into a main() "
        "called under if __name__ == '__main__':, or set num_workers=0 to confirm.",
        sources=("https://pytorch.org/docs/stable/data.html#platform-specific-behaviors",
                 "https://docs.python.org/3/library/multiprocessing.html#the-spawn-and-forkserver-start-methods"),
    ),
)
