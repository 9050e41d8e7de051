"""Error knowledge: recognise an error (exception or pasted text) and explain it."""

from nbdebug.core.fixes._diagnosis import Diagnosis, Fix, Section
from nbdebug.core.fixes._explain import explain

__all__ = ["Diagnosis", "Fix", "Section", "explain"]
