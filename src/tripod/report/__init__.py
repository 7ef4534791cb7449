"""See what the agent did: trajectory records, the HTML report and the terminal viewer.

`records` defines the on-disk trajectory format (written by the RL loop and evaluations,
read here); `html` builds `tripod report`; `inspect` is `tripod inspect`; `commands`
registers both subcommands on tripod's argument parser.
"""
