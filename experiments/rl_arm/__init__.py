"""The TRLOO arm of issue 62: fresh prompts, a correctness reward, sound updates, resumable state, a pre-registered paired evaluation, and the continued-SFT control."""
