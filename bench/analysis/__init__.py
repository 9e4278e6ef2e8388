"""From benchmark output to decisions and pictures: the threshold rule, the report and thresholds entry from the
sweep's CSVs, the README's plots."""
