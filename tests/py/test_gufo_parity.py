"""Liftbridge's status codes as gufo-liftbridge 0.2.0 sees them."""

import pytest
from gufo.liftbridge.client import LiftbridgeClient
from gufo.liftbridge.error import ErrorNotFound


@pytest.mark.asyncio
async def test_gufo_delete_stream_without_name_is_not_found(server):
    async with LiftbridgeClient([server.grpc]) as client:
        # An empty name is a stream that does not exist: NOT_FOUND, which
        # gufo raises as ErrorNotFound (INVALID_ARGUMENT would not be).
        with pytest.raises(ErrorNotFound):
            await client.delete_stream("")
        with pytest.raises(ErrorNotFound):
            await client.delete_stream("ghost")
        # Nothing was created or removed by either call.
        meta = await client.get_metadata()
        assert [s.name for s in meta.metadata if not s.name.startswith("__")] == []
