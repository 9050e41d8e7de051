"""Pure analysis: no IPython, ipywidgets or matplotlib at import time; torch is imported where it is needed."""
