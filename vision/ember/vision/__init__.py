"""ember.vision."""
