"""Small Tk apps written for the built-in task suite. Each writes its state (values and widget geometry)
to a JSON file, for checkers to score and for scripted oracles to aim at."""
