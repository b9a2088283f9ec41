"""ember.arrow."""
