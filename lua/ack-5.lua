--[[
  Record the outcomes of items of one request: done, retry later, or dead
  letter. Counts them, publishes progress (coalesced) and closes the request
  when they were its last. A redelivered item overwrites its own result slot;
  an item acknowledged already (by a worker whose lease ran out and another
  that ran it again) is counted once.

  Input:
    KEYS[1..5] meta, items, leases, results, dead of the request
    ARGV[1] worker id
    ARGV[2] retention in ms (for keys of a request that closes now)
    ARGV[3] pub/sub channel for events ("" for none)
    ARGV[4..] outcomes, in sixes: entry id, item index, outcome (done | retry | dead | cancelled),
              result record (JSON text), retry delay in ms, the attempt's line for the item's
              attempts (core/engine/attempts.py; "" for none: a done attempt is its result record)

  Output:
    {closed now (1/0), state, items counted, de-dup key}
]]
--@include _common.lua
--@include _request.lua
--@include _ack.lua
return ack_request(ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV, 4, #ARGV)
