"""nasir.tools."""
