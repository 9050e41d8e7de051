"""Error knowledge: recognise an error (exception or pasted text) and explain it."""

from nbdebug.core.explain._diagnosis import Diagnosis, Fix, Section
from nbdebug.core.explain._explain import explain

__all__ = ["Diagnosis", "Fix", "Section", "explain"]
