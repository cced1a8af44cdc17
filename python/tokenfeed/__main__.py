"""`python -m tokenfeed ...`: the `tokenfeed` command, as the console script runs it."""
from ._cli import main

main()
