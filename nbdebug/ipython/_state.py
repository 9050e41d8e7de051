"""What loading the extension added to a shell, so that unloading can take every piece of it off again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# (exception, diagnosis) -> diagnosis; lets a feature (e.g. OOM capture) add sections to the error panel.
Enricher = Callable[[BaseException, Any], Any]


@dataclass
class Feature:
    """A switch shown by ``%nbdebug`` and flipped by ``%nbdebug NAME on|off``."""

    name: str
    description: str
    enable: Callable[[], None]
    disable: Callable[[], None]
    on: bool = False

    def set(self, on: bool) -> None:
        if on and not self.on:
            self.enable()
        elif not on and self.on:
            self.disable()
        self.on = on


@dataclass
class ExtensionState:
    """Everything one ``%load_ext nbdebug`` added to one shell."""

    shell: Any
    magic_names: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)
    magic_classes: list[str] = field(default_factory=list)
    # magics of the same name that were there before loading (another extension's %explain): put back on unload
    shadowed: dict[tuple[str, str], Any] = field(default_factory=dict)
    events: list[tuple[str, Callable[..., Any]]] = field(default_factory=list)
    features: dict[str, Feature] = field(default_factory=dict)
    enrichers: list[Enricher] = field(default_factory=list)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def register_magics(self, magics_class: type) -> None:
        """Register a ``Magics`` class and remember its magic names."""
        instance = magics_class(shell=self.shell)
        instance.nbd_state = self  # magics reach their extension state as ``self.nbd_state``
        existing = self.shell.magics_manager.magics
        for kind, names in instance.magics.items():
            for name in names:
                if name in existing.get(kind, {}) and (kind, name) not in self.shadowed:
                    self.shadowed[(kind, name)] = existing[kind][name]
        self.shell.register_magics(instance)
        for kind, names in instance.magics.items():
            for name in names:
                self.magic_names.append((kind, name))
        self.magic_classes.append(magics_class.__name__)

    def register_event(self, event: str, callback: Callable[..., Any]) -> None:
        """Register an IPython event callback (``pre_run_cell``, ``post_run_cell``, ...)."""
        self.shell.events.register(event, callback)
        self.events.append((event, callback))

    def add_feature(self, feature: Feature, *, on: bool = False) -> None:
        """Add a switchable feature; it is switched off again on unload."""
        self.features[feature.name] = feature
        if on:
            feature.set(True)

    def add_enricher(self, enricher: Enricher) -> None:
        """Add a function that may add sections to a diagnosis before it is shown."""
        self.enrichers.append(enricher)

    def on_unload(self, cleanup: Callable[[], None]) -> None:
        """Run ``cleanup`` when the extension is unloaded (last registered, first run)."""
        self.cleanups.append(cleanup)

    def teardown(self) -> list[str]:
        """Undo everything; return the problems met (unload never raises half-way)."""
        problems: list[str] = []
        for feature in self.features.values():
            try:
                feature.set(False)
            except Exception as e:  # keep going: every other hook must still come off
                problems.append(f"feature {feature.name}: {e!r}")
        for cleanup in reversed(self.cleanups):
            try:
                cleanup()
            except Exception as e:
                problems.append(f"cleanup {cleanup!r}: {e!r}")
        for event, callback in self.events:
            try:
                self.shell.events.unregister(event, callback)
            except ValueError:
                pass
        manager = self.shell.magics_manager
        for kind, name in self.magic_names:
            manager.magics.get(kind, {}).pop(name, None)
        for (kind, name), previous in self.shadowed.items():
            manager.magics.setdefault(kind, {})[name] = previous
        for cls_name in self.magic_classes:
            manager.registry.pop(cls_name, None)
        self.magic_names.clear()
        self.magic_classes.clear()
        self.shadowed.clear()
        self.events.clear()
        self.features.clear()
        self.enrichers.clear()
        self.cleanups.clear()
        return problems
