"""Detection models (torchvision.models.detection names, builders and state_dict layouts);
weights load from local files only."""
