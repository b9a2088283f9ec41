"""ember.tools: the ember command line, benchmark harness and demo."""
