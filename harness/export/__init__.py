"""Trained checkpoints as Hugging Face model folders (`attnbench export`): config, safetensors
weights, a tokenizer AutoTokenizer loads, and remote-code modules that build the model
through attnbench and the variant's installed plugin."""
