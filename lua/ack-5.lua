--[[
  Record the outcome of one item: done, retry later, or dead letter. Counts
  it, publishes progress (coalesced) and closes the request when this was
  its last item. A redelivered item overwrites its own result slot.

  Input:
    KEYS[1..5] meta, items, leases, results, dead of the request
    ARGV[1] entry id
    ARGV[2] item index
    ARGV[3] worker id
    ARGV[4] outcome: done | retry | dead
    ARGV[5] result record (JSON text)
    ARGV[6] retry delay in ms (for retry)
    ARGV[7] retention in ms (for keys of a request that closes now)
    ARGV[8] pub/sub channel for events ("" for none)

  Output:
    {closed now (1/0), state}
    -3  the item is no longer pending, or is held by another worker (retry/dead)
]]
--@include _common.lua
--@include _request.lua
local id, idx, worker, outcome = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local owner = pending_info(id)
if not owner then return -3 end -- NOT_HELD: already acknowledged
if owner ~= worker and outcome ~= 'done' then return -3 end -- NOT_HELD: redelivered elsewhere
local now = now_ms()
redis.call('HSET', KEYS[4], idx, ARGV[5])
if outcome == 'retry' then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), id)
else
  redis.call('XACK', KEYS[2], 'g', id)
  redis.call('ZREM', KEYS[3], id)
  if outcome == 'dead' then
    redis.call('ZADD', KEYS[5], now, id)
    redis.call('HINCRBY', KEYS[1], 'failed', 1)
  else
    redis.call('HINCRBY', KEYS[1], 'done', 1)
  end
end
local closed = finish_if_done(now, tonumber(ARGV[7]), ARGV[8])
if not closed then publish_progress(KEYS[1], ARGV[8], now) end
return {closed and 1 or 0, redis.call('HGET', KEYS[1], 'state')}
