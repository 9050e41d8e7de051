"""Trigger real errors of issue 23's structure categories (and their neighbours) and write each to ``<slug>__<short>.txt``.

Run from the repository root: ``python tests/data/errors/make_structure_corpus.py``.  Like make_cpu_corpus.py, every
file is the ``traceback.format_exc()`` of a real raise (torch, safetensors, transformers and lightning_utilities as
installed; the first line records the versions).  Two libraries that do not fit together cannot be installed side by
side on purpose, so those cases write two small packages into a temporary ``site-packages`` folder (a caller written
for a newer release of the package it calls) and run them in a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES: dict[str, Callable[[], None]] = {}


def case(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def deco(fn: Callable[[], None]) -> Callable[[], None]:
        CASES[name] = fn
        return fn

    return deco


_TMP = tempfile.mkdtemp()


@case("checkpoint_load_failed__torch_load_directory")
def _():
    import torch

    torch.load(_TMP)  # a folder given where a checkpoint file was meant


@case("checkpoint_load_failed__safetensors_missing_file")
def _():
    from safetensors.torch import load_file

    load_file(os.path.join(_TMP, "model.safetensors"))


@case("checkpoint_load_failed__config_without_model_type")
def _():
    from transformers import AutoConfig

    Path(_TMP, "config.json").write_text('{"hidden_size": 8}')
    AutoConfig.from_pretrained(_TMP)


@case("version_required__transformers_require_version")
def _():
    from transformers.utils.versions import require_version

    require_version("numpy<1.0")


@case("version_required__lightning_requirement")
def _():
    from lightning_utilities.core.imports import RequirementCache

    # what Lightning raises when an optional requirement is not met
    raise ModuleNotFoundError(str(RequirementCache("torch>=99.0")))


@case("collate_failed__pil_images")
def _():
    from PIL import Image
    from torch.utils.data import DataLoader

    images = [Image.new("RGB", (8, 8)) for _ in range(4)]  # a dataset without ToTensor in its transform
    next(iter(DataLoader(images, batch_size=2)))


@case("collate_failed__sample_without_a_key")
def _():
    import torch
    from torch.utils.data import DataLoader

    samples = [{"x": torch.ones(2), "labels": 1}, {"x": torch.ones(2)}]  # the second sample has no label
    next(iter(DataLoader(samples, batch_size=2)))


@case("dataset_empty__shuffled_loader")
def _():
    from torch.utils.data import DataLoader

    DataLoader([], batch_size=4, shuffle=True)  # a dataset that found no files


@case("dataset_empty__folder_dataset")
def _():
    import glob

    from torch.utils.data import DataLoader, Dataset

    class Folder(Dataset):
        def __init__(self, root):
            self.files = sorted(glob.glob(os.path.join(root, "*.png")))

        def __len__(self):
            return len(self.files)

    DataLoader(Folder(os.path.join(_TMP, "train")), batch_size=4, shuffle=True)


# the two packages: "picture" is an old release, "gallery" calls it as a newer release of picture allows
_PACKAGES = {
    # a lazy module, as transformers' _LazyModule: a name it does not have is looked up by __getattr__
    "picture/__init__.py": (
        "from .image import open  # noqa: F401\n\n"
        "def __getattr__(name):\n    raise AttributeError(f'module {__name__} has no attribute {name}')\n"),
    "picture/image.py": (
        "class Image:\n"
        "    def __init__(self, path):\n        self.path = path\n"
        "    def __getattr__(self, name):\n        raise AttributeError(name)\n\n"
        "def open(path):\n    return Image(path)\n"),
    "gallery/__init__.py": "",
    # a registry of named classes, as allennlp's Registrable and mmengine's Registry keep them
    "confreg/__init__.py": "",
    "confreg/registrable.py": (
        "class ConfigurationError(Exception):\n    pass\n\n"
        "class Registrable:\n    _registry = {}\n\n"
        "    @classmethod\n    def by_name(cls, name):\n"
        "        if name not in cls._registry:\n"
        "            raise ConfigurationError(f'{name} is not a registered name for {cls.__name__}')\n"
        "        return cls._registry[name]\n\n"
        "class Registry:\n    def __init__(self, name):\n        self.name, self.modules = name, {}\n\n"
        "    def build(self, cfg):\n        kind = cfg['type']\n"
        "        if kind not in self.modules:\n"
        "            raise KeyError(f'{kind} is not in the {self.name} registry')\n"
        "        return self.modules[kind](**cfg)\n"),
    "gallery/folder.py": (
        "import picture\n\n"
        "def loader(path):\n    img = picture.open(path)\n    return img.reduce(2)  # added in picture 2\n\n"
        "def resample_filter():\n    return picture.Resampling.BILINEAR  # added in picture 2\n"),
}
# folders of a project without __init__.py, next to the script (a cloned repository's folder named like the package)
_FOLDERS = {"fastpose/README.md": "# fastpose\n", "segtool/models/README.md": "# models\n",
            "nerfkit/configs/base.yaml": "lr: 0.01\n"}
_PACKAGES["speechkit/data/vocab.txt"] = "a\nb\n"  # a package's folder an uninstall left behind (its data, no code)
_ARGPARSE = ("import argparse, sys\n"
             "parser = argparse.ArgumentParser(prog='train.py')\n"
             "parser.add_argument('--config', required=True)\n"
             "parser.add_argument('--max-tokens', type=int, default=1024)\n"
             "parser.add_argument('--num-devices', type=int, default=1)\n"
             "sys.argv = ['train.py'] + {argv!r}  # the command line as a README of another release wrote it\n"
             "parser.parse_args()\n")
_SCRIPTS = {
    "cli_usage__argparse_unrecognized": _ARGPARSE.format(argv=["--config", "a.yaml", "--num-gpus", "2"]),
    "cli_usage__argparse_invalid_value": _ARGPARSE.format(argv=["--config", "a.yaml", "--max-tokens", "4k"]),
    "cli_usage__argparse_required": _ARGPARSE.format(argv=["--max-tokens", "2048"]),
    "cli_usage__click_no_such_command": (
        "import click, sys\n\n@click.group()\ndef cli():\n    pass\n\n@cli.command()\ndef download():\n    pass\n\n"
        "sys.argv = ['tune', 'run', 'full_finetune']\ncli(prog_name='tune')\n"),
    "namespace_package__cloned_repo_folder": "from fastpose import Estimator\nEstimator()\n",
    "namespace_package__subpackage": "from segtool.models import build_segmentor\n",
    "namespace_package__inside_function": "def main():\n    from nerfkit import Trainer\n    Trainer()\n\n\nmain()\n",
    "namespace_package__uninstall_leftover": "from speechkit import Recognizer\n",
    "libraries_disagree__missing_method": "from gallery.folder import loader\nloader('cat.png')\n",
    "libraries_disagree__lazy_module": "from gallery.folder import resample_filter\nresample_filter()\n",
    # a package's module run as a script (its relative imports have no package)
    "relative_import_script__run_as_script": "from .data import load_split\nload_split('train')\n",
    "relative_import_script__dot_import": "from . import utils\nutils.seed_all(0)\n",
    "registry_name_missing__registrable": (
        "from confreg.registrable import Registrable\n\nclass Model(Registrable):\n    pass\n\n"
        "Model.by_name('constituency_parser')  # registered by a release the archive was made with\n"),
    "registry_name_missing__registry_build": (
        "from confreg.registrable import Registry\n\nMODELS = Registry('model')\n"
        "MODELS.build({'type': 'CascadeRCNNPlus'})  # registered by a companion package not imported\n"),
    # a process group of one rank (gloo on the CPU), asked for what only a larger group has
    "distributed_call_failed__broadcast_root": (
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo', rank=0, world_size=1, store=dist.HashStore())\n"
        "dist.broadcast(torch.ones(2), src=3)\n"),
    "distributed_call_failed__new_group": (
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo', rank=0, world_size=1, store=dist.HashStore())\n"
        "dist.new_group(ranks=[0, 1])\n"),
}


def run_in_process(fn: Callable[[], None]) -> str | None:
    try:
        fn()
    except BaseException:
        return traceback.format_exc()
    return None


def run_script(source: str) -> str | None:
    with tempfile.TemporaryDirectory() as d:
        site = Path(d) / "lib" / "python3" / "site-packages"
        for rel, text in _PACKAGES.items():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(text)
        for rel, text in _FOLDERS.items():
            (Path(d) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(d) / rel).write_text(text)
        script = Path(d) / "train.py"
        script.write_text(source)
        env = {**os.environ, "PYTHONPATH": str(site)}
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=d, env=env)
    if proc.returncode == 0:
        return None
    return proc.stderr.replace(d, "/home/user/project")


def _anonymise(text: str) -> str:
    """Keep the texts real but free of this machine's paths."""
    text = text.replace(_TMP, "/home/user/checkpoints")
    text = text.replace(str(HERE.parents[2]), "/home/user/nbdebug")
    text = text.replace(sys.prefix, "/home/user/.venv")
    return text.replace(str(Path.home()), "/home/user")


def main() -> int:
    import importlib.metadata as md

    versions = ", ".join(f"{d} {md.version(d)}" for d in ("torch", "safetensors", "transformers", "lightning-utilities"))
    header = (f"# source: generated on CPU by tests/data/errors/make_structure_corpus.py ({versions}, "
              f"python {sys.version.split()[0]})\n")
    texts = {name: run_in_process(fn) for name, fn in CASES.items()}
    texts |= {name: run_script(source) for name, source in _SCRIPTS.items()}
    missed = [name for name, text in texts.items() if text is None]
    for name, text in texts.items():
        if text is not None:
            (HERE / f"{name}.txt").write_text(header + _anonymise(text))
    print(f"wrote {len(texts) - len(missed)} files to {HERE}" + (f"; did not raise: {', '.join(missed)}" if missed else ""))
    return 1 if missed else 0

if __name__ == "__main__":
    raise SystemExit(main())
