"""ResourceQuota and LimitRange: usage, admission, controller."""
