#!/usr/bin/env bash
# s30c.sh cut to fit session 30's device time left: k = 3, M = 4, a 300 s plan (the decode
# then does not fit and is skipped).   bash bench/device/s30d.sh (carry .whl)
KS=3 MS=4 END_S=${END_S:-300} TAG=${TAG:--s30d} exec bash bench/device/s30c.sh
