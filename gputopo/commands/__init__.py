"""One module per command (as accelerate's commands/): each reads its options, calls one function of the domain
layer and renders what it returns. No defaults, rules or arithmetic here."""
import importlib

# Each command's module, imported when that command is asked for (as accelerate's CLI does): `inspect --from-file`
# loads inspect's alone; --help, which lists them all, loads every one.
LAZY = {"inspect": "inspect", "plan": "plan", "deepspeed-config": "deepspeed_config", "doctor": "doctor",
        "bench-nvlink": "bench_nvlink"}


class Commands(dict):
    """The group's commands by name, each module imported on first use; asking for all (items, iteration: --help,
    the tests) imports all."""

    def __missing__(self, name: str):
        if name not in LAZY:
            raise KeyError(name)
        module = LAZY[name]
        self[name] = command = getattr(importlib.import_module(f".{module}", __package__), module)
        return command

    def get(self, name, default=None):
        return self[name] if name in self else default

    def __contains__(self, name) -> bool:
        return name in LAZY or dict.__contains__(self, name)

    def _all(self) -> None:
        for name in LAZY:
            self[name]   # noqa: B018 (imports it)

    def __iter__(self):
        self._all()
        return iter(list(LAZY) + [n for n in dict.keys(self) if n not in LAZY])

    def __len__(self) -> int:
        return len(set(LAZY) | set(dict.keys(self)))

    def keys(self):
        self._all()
        return dict.keys(self)

    def items(self):
        self._all()
        return dict.items(self)

    def values(self):
        self._all()
        return dict.values(self)
