"""Tuning: schedules chosen by timing candidates, on this machine (host.py: `nasir tune`, the llvm
backend's candidates per nest class into the tuning database) or on a machine with TVM's runtime
alone (remote.py: `nasir tune --target cuda --export DIR`, timed there, `--import DIR` here).
"""
