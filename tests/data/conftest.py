import pickle

import pytest


def resume_matches(make_pipe, stop: int) -> tuple[list, list]:
    """Iterate ``stop`` items, checkpoint (through pickle), restore into a fresh graph from
    ``make_pipe()`` and return (rest of the uninterrupted stream, stream after restore)."""
    it = iter(make_pipe())
    for _ in range(stop):
        next(it)
    state = pickle.loads(pickle.dumps(it.state_dict()))
    rest = list(it)
    it2 = iter(make_pipe())
    it2.load_state_dict(state)
    return rest, list(it2)


@pytest.fixture
def resume():
    return resume_matches
