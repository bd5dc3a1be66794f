"""The project's own developer tools: generators of the checked-in references (configuration, components, exit
codes, instance catalogue) and the mutation check. Still reachable as ``ray-efa-eks`` subcommands; no user's command
imports them."""
