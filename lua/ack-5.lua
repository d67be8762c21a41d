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
    ARGV[4..] outcomes, in fives: entry id, item index, outcome (done | retry | dead | cancelled),
              result record (JSON text), retry delay in ms

  Output:
    {closed now (1/0), state, items counted, de-dup key}
]]
--@include _common.lua
--@include _request.lua
local worker = ARGV[1]
local now = now_ms()
local counted, done, failed = 0, 0, 0
local lean = redis.call('HGET', KEYS[1], 'lean') == '1'
for i = 4, #ARGV, 5 do
  local id, idx, outcome = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local holder = lean and redis.call('HGET', KEYS[2], 'h')
  if lean and outcome == 'done' then
    if holder then -- delivered and not closed yet: the first acknowledgement counts
      lean_close(id, idx, ARGV[i + 3], nil)
      done = done + 1
      counted = counted + 1
    end
  elseif lean then
    if holder == worker then -- retry/dead only from the item's current holder
      if outcome == 'retry' then
        redis.call('HSET', KEYS[4], idx, ARGV[i + 3])
        redis.call('ZADD', KEYS[3], now + tonumber(ARGV[i + 4]), id)
      else
        lean_close(id, idx, ARGV[i + 3], nil)
        if outcome ~= 'cancelled' then
          redis.call('ZADD', KEYS[5], tonumber(idx), id) -- scored by item index, as below
          failed = failed + 1
        end
      end
      counted = counted + 1
    end
  elseif outcome == 'done' then
    -- the first worker to acknowledge an item counts it (XACK says 0 after that)
    if redis.call('XACK', KEYS[2], 'g', id) == 1 then
      redis.call('HSET', KEYS[4], idx, ARGV[i + 3])
      redis.call('ZREM', KEYS[3], id)
      done = done + 1
      counted = counted + 1
    end
  elseif pending_info(id) == worker then -- retry/dead only from the item's current holder
    redis.call('HSET', KEYS[4], idx, ARGV[i + 3])
    if outcome == 'retry' then
      redis.call('ZADD', KEYS[3], now + tonumber(ARGV[i + 4]), id)
    elseif outcome == 'cancelled' then -- stopped because its request was cancelled: no dead letter
      redis.call('XACK', KEYS[2], 'g', id)
      redis.call('ZREM', KEYS[3], id)
    else
      redis.call('XACK', KEYS[2], 'g', id)
      redis.call('ZREM', KEYS[3], id)
      redis.call('ZADD', KEYS[5], tonumber(idx), id) -- scored by item index: dead letters list in item order
      failed = failed + 1
    end
    counted = counted + 1
  end
end
if done > 0 then redis.call('HINCRBY', KEYS[1], 'done', done) end
if failed > 0 then redis.call('HINCRBY', KEYS[1], 'failed', failed) end
local closed = finish_if_done(now, tonumber(ARGV[2]), ARGV[3])
if not closed and counted > 0 then publish_progress(KEYS[1], ARGV[3], now) end
local v = redis.call('HMGET', KEYS[1], 'state', 'dedup_key')
return {closed and 1 or 0, v[1] or '', counted, v[2] or ''}
