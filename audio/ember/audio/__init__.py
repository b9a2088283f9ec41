"""ember.audio."""
