"""IPython glue only: magics, the error explainer hook, widget panels."""
