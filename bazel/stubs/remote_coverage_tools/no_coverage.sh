#!/bin/sh
echo "coverage is not available: @remote_coverage_tools is kiln's offline stub" >&2
exit 1
