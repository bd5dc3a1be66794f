"""Tools built on the library: the offline plan and diff, layout rules (the policy pack imports them), the mock
runner, the config schema generator, AWS preflight and the one `ray-efa-eks` command."""
