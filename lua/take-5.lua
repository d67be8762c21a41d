--[[
  Give a worker holding N of this request's tokens up to N items, one per
  token: first items whose lease ran out or whose retry time came (a
  redelivery, counted as an attempt; past max attempts it is dead-lettered),
  then the oldest undelivered items. Items of an expired request are marked
  expired instead of being handed out.

  Input:
    KEYS[1..5] meta, items, leases, results, dead of the request
    ARGV[1] worker id (the consumer name)
    ARGV[2] lease in ms
    ARGV[3] max attempts
    ARGV[4] retention in ms (for keys of a request that closes now)
    ARGV[5] pub/sub channel for events ("" for none)
    ARGV[6] N, the number of tokens held
    ARGV[7] (optional) "k|priority" when the tokens were kept from items just
            acknowledged instead of being claimed anew (core/engine/keeping.py):
            the highest token number among them and the priority they were
            claimed at. Nothing is handed out if the request has its own rate
            limit, or its priority or concurrency changed since (kind 5).

  Output:
    {kind, wake time, processor, de-dup key, time limit, priority, lean, id1, index1, payload1, attempt1, id2, ...}
    with up to N items (time limit: the request's own, in seconds, or "" for
    the queue's; lean: 1 for a request of one item); kind says what to do
    with the tokens left without one:
      0  none left over
      2  park them until the wake time (items in flight elsewhere or waiting to retry)
      3  park them until items are added (streamed request, not finalized)
      4  drop them: the request is finished
      5  return them to the queue (kept tokens that may not go on, see ARGV[7])
    -1  no such request
]]
--@include _common.lua
--@include _request.lua
local worker, lease, max_attempts = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local retention, channel, want = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local meta = KEYS[1]
local state = redis.call('HGET', meta, 'state')
if not state then return -1 end -- NOT_FOUND
local info = redis.call('HMGET', meta, 'processor', 'dedup_key', 'time_limit', 'priority', 'lean', 'concurrency',
                        'rate_limit')
local processor, dedup, limit = info[1] or '', info[2] or '', info[3] or ''
local priority, lean = tonumber(info[4]) or 0, info[5] == '1' and 1 or 0
if TERMINAL[state] then return {4, 0, processor, dedup, limit, priority, lean} end
if ARGV[7] then
  local k, p = string.match(ARGV[7], '^(%d+)|(%d+)$')
  if info[7] or tonumber(k) > (tonumber(info[6]) or 0) or tonumber(p) ~= priority then
    return {5, 0, processor, dedup, limit, priority, lean}
  end
end
local now = now_ms()
local out = {0, 0, processor, dedup, limit, priority, lean}

local function close_item(id, idx, record, counter)
  redis.call('XACK', KEYS[2], 'g', id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('HSET', KEYS[4], idx, record)
  redis.call('HINCRBY', meta, counter, 1)
end

-- What to do with tokens that got no item.
local function leftover()
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if #first == 2 then return 2, math.max(tonumber(first[2]), now + 1) end
  if redis.call('HGET', meta, 'finalized') ~= '1' then return 3, 0 end
  finish_if_done(now, retention, channel)
  return 4, 0
end

-- The request runs once an item is handed out; tokens left without an item get
-- their instruction. Returns the script's answer.
local function finish_take(given)
  if given > 0 and state ~= 'running' then
    redis.call('HSET', meta, 'state', 'running')
    if not redis.call('HGET', meta, 'started_at') then redis.call('HSET', meta, 'started_at', now) end
  end
  if given < want then
    out[1], out[2] = leftover()
  end
  return out
end

-- A lean request (one item in a hash, see _request.lua): the same steps for its item.
if redis.call('HGET', meta, 'lean') == '1' then
  local f = redis.call('HMGET', KEYS[2], 'i', 'p', 'e', 'd', 'c')
  local idx, payload, id, d = f[1], f[2], f[3], tonumber(f[4]) or 0
  local lease_at = tonumber(redis.call('ZSCORE', KEYS[3], id))
  local runnable = f[5] ~= '1' and ((d == 0 and not lease_at) or (lease_at and lease_at <= now))
  local expires_at = tonumber(redis.call('HGET', meta, 'expires_at'))
  if expires_at and now >= expires_at then
    if runnable then lean_close(id, idx, cjson.encode({status = 'expired'}), 'expired') end
    if finish_if_done(now, retention, channel) then return {4, 0, processor, dedup, limit, priority, lean} end
    local kind, wake_at = leftover()
    return {kind, wake_at, processor, dedup, limit, priority, lean}
  end
  local given = 0
  if runnable and want >= 1 then
    if d + 1 > max_attempts then -- its lease ran out on every attempt
      local rec = cjson.decode(redis.call('HGET', KEYS[4], idx) or '{}')
      rec.status = 'failed'
      rec.attempts = d
      if not rec.error then rec.error = 'lease expired: the worker died or stalled on every attempt' end
      rec.finished_at = now / 1000
      lean_close(id, idx, cjson.encode(rec), 'failed')
      redis.call('ZADD', KEYS[5], tonumber(idx), id) -- scored by item index (see ack)
      if finish_if_done(now, retention, channel) then
        out[1] = 4
        return out
      end
    else
      redis.call('HSET', KEYS[2], 'h', worker, 'd', d + 1, 't', now)
      redis.call('ZADD', KEYS[3], now + lease, id)
      out[8], out[9], out[10], out[11] = id, idx, payload, d + 1
      given = 1
    end
  end
  return finish_take(given)
end

-- Expired request: everything not yet run is marked expired, a batch per call.
local expires_at = tonumber(redis.call('HGET', meta, 'expires_at'))
if expires_at and now >= expires_at then
  local expired_record = cjson.encode({status = 'expired'})
  local n = 0
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 1000)) do
    local e = redis.call('XRANGE', KEYS[2], id, id)
    if #e == 1 then close_item(id, entry_fields(e[1][2]), expired_record, 'expired'); n = n + 1 end
  end
  local fresh = redis.call('XREADGROUP', 'GROUP', 'g', worker, 'COUNT', 1000, 'STREAMS', KEYS[2], '>')
  if fresh then
    for _, e in ipairs(fresh[1][2]) do close_item(e[1], entry_fields(e[2]), expired_record, 'expired'); n = n + 1 end
  end
  if finish_if_done(now, retention, channel) then return {4, 0, processor, dedup, limit, priority, lean} end
  if n > 0 then return {2, now, processor, dedup, limit, priority, lean} end -- more to expire: come back at once
  local kind, wake_at = leftover()
  return {kind, wake_at, processor, dedup, limit, priority, lean}
end

local function hand_out(id, idx, payload, attempt)
  redis.call('ZADD', KEYS[3], now + lease, id)
  out[#out + 1] = id
  out[#out + 1] = idx
  out[#out + 1] = payload
  out[#out + 1] = attempt
end

local given = 0
-- Redelivery of items whose lease ran out (or whose retry time came).
for _ = 1, want + 100 do
  if given >= want then break end
  local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 1)
  if #due == 0 then break end
  local id = due[1]
  local e = redis.call('XCLAIM', KEYS[2], 'g', worker, 0, id)[1]
  if not e or not e[2] then
    redis.call('ZREM', KEYS[3], id) -- acknowledged or deleted meanwhile
  else
    local idx, payload = entry_fields(e[2])
    local _, attempt = pending_info(id)
    if attempt > max_attempts then
      local rec = cjson.decode(redis.call('HGET', KEYS[4], idx) or '{}')
      rec.status = 'failed'
      rec.attempts = attempt - 1
      if not rec.error then rec.error = 'lease expired: the worker died or stalled on every attempt' end
      rec.finished_at = now / 1000
      close_item(id, idx, cjson.encode(rec), 'failed')
      redis.call('ZADD', KEYS[5], tonumber(idx), id) -- scored by item index (see ack)
      if finish_if_done(now, retention, channel) then
        out[1] = 4
        return out
      end
    else
      hand_out(id, idx, payload, attempt)
      given = given + 1
    end
  end
end

if given < want then
  local fresh = redis.call('XREADGROUP', 'GROUP', 'g', worker, 'COUNT', want - given, 'STREAMS', KEYS[2], '>')
  if fresh then
    for _, e in ipairs(fresh[1][2]) do
      local idx, payload = entry_fields(e[2])
      hand_out(e[1], idx, payload, 1)
      given = given + 1
    end
  end
end

return finish_take(given)
