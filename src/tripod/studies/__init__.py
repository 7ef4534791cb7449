"""Studies: grids of recipe variants run one after another, summarised in one table."""
