"""The notebook front: IPython magics (and, later, widgets)."""
