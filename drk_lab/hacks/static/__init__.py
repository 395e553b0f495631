"""The static hack checks: what a candidate's source shows before it runs (rules.py, `static_hack_check`),
built on the facts read off its syntax tree (facts.py), the names of what it must not touch (names.py) and
the state of the calls it makes (state.py)."""
