"""Engine-side helpers for MMEngine runs: safe checkpoint loading (:mod:`.checkpoint`),
CPU multi-process set-up (:mod:`.dist`) and data checks that name the bad file
(:mod:`.data_check`; the rules of valid data in :mod:`.data_validation`). The models do not depend on this package.
"""
