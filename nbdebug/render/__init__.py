"""Pure functions: result object -> text / HTML / matplotlib Figure."""
