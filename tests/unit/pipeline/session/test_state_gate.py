"""The per-session order of requests around statements that change the session's state."""

from __future__ import annotations

import asyncio

import pytest

from rowgate.pipeline.session.state_gate import GateTimeout, StateGate


def run(coro):
    return asyncio.run(coro)


def test_a_writer_waits_for_the_readers_before_it_and_new_readers_wait_for_the_writer():
    async def go():
        gate = StateGate()
        order: list[str] = []
        early = await gate.enter_read(5)

        async def writer():
            await gate.enter_write(5)
            order.append("write")
            await asyncio.sleep(0.01)
            gate.leave_write()

        async def late_reader():
            ticket = await gate.enter_read(5)
            order.append(f"read v{ticket.version}")
            ticket.release()

        w = asyncio.ensure_future(writer())
        await asyncio.sleep(0.01)
        r = asyncio.ensure_future(late_reader())
        await asyncio.sleep(0.01)
        assert order == []  # the writer waits for `early`, the late reader for the writer
        early.release()
        early.release()  # idempotent
        await asyncio.gather(w, r)
        assert order == ["write", "read v1"]
        assert gate.readers == 0 and not gate.writing

    run(go())


def test_waits_are_bounded_and_a_writer_that_gave_up_lets_readers_in():
    async def go():
        gate = StateGate()
        held = await gate.enter_read(5)
        with pytest.raises(GateTimeout):
            await gate.enter_write(0.05)
        ticket = await asyncio.wait_for(gate.enter_read(1), 1)
        ticket.release()
        held.release()
        await gate.enter_write(1)
        with pytest.raises(GateTimeout):
            await gate.enter_read(0.05)
        gate.leave_write()
        assert gate.version == 1

    run(go())


def test_two_writers_run_one_after_the_other():
    async def go():
        gate = StateGate()
        running = []

        async def writer(name):
            await gate.enter_write(5)
            running.append(name)
            assert gate.writing
            await asyncio.sleep(0.01)
            running.remove(name)
            gate.leave_write()

        async def watch():
            for _ in range(20):
                assert len(running) <= 1
                await asyncio.sleep(0.002)

        await asyncio.gather(writer("a"), writer("b"), watch())
        assert gate.version == 2

    run(go())


def test_an_upgraded_reader_writes_before_a_waiting_writer_and_leaves_the_version_alone():
    async def go():
        gate = StateGate()
        order: list[str] = []
        mine = await gate.enter_read(5)
        other = await gate.enter_read(5)

        async def writer():
            await gate.enter_write(5)
            order.append(f"write v{gate.version}")
            gate.leave_write()

        async def upgrader():
            assert await gate.upgrade(mine, 5)
            order.append("upgraded")
            gate.leave_write(changed=False)

        w = asyncio.ensure_future(writer())
        await asyncio.sleep(0.01)  # the writer waits for both readers
        u = asyncio.ensure_future(upgrader())
        await asyncio.sleep(0.01)
        assert order == []  # the upgrade waits for the other reader
        late = asyncio.ensure_future(gate.enter_read(5))
        await asyncio.sleep(0.01)
        assert not late.done()  # new readers wait behind the upgrade
        other.release()
        await asyncio.gather(w, u)
        (await late).release()
        assert order == ["upgraded", "write v0"]  # nothing the proxy remembers changed
        assert gate.version == 1
        mine.release()  # idempotent after the upgrade: the reader count is not touched again
        assert gate.readers == 0

    run(go())


def test_a_second_upgrade_at_once_is_declined():
    async def go():
        gate = StateGate()
        a, b = await gate.enter_read(5), await gate.enter_read(5)
        first = asyncio.ensure_future(gate.upgrade(a, 5))
        await asyncio.sleep(0.01)
        assert await gate.upgrade(b, 5) is False
        b.release()
        assert await first
        gate.leave_write(changed=False)

    run(go())
