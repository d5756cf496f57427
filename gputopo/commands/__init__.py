"""One module per command (as accelerate's commands/): each reads its options, calls one function of the domain
layer and renders what it returns. No defaults, rules or arithmetic here."""
