--[[
  Give the worker holding one of this request's tokens its next item: first
  an item whose lease ran out (redelivery, counted as an attempt; past max
  attempts it is dead-lettered), else the oldest undelivered item. Items of
  an expired request are marked expired instead of being handed out.

  Input:
    KEYS[1..5] meta, items, leases, results, dead of the request
    ARGV[1] worker id (the consumer name)
    ARGV[2] lease in ms
    ARGV[3] max attempts
    ARGV[4] retention in ms (for keys of a request that closes now)
    ARGV[5] pub/sub channel for events ("" for none)

  Output:
    {1, entry id, index, payload, attempt, processor}  an item to run
    {2, wake time}    nothing to run before then (items in flight or waiting to retry)
    {3}               nothing to run until items are added (not finalized)
    {4}               the request is finished: drop the token
    -1                no such request
]]
--@include _common.lua
--@include _request.lua
local worker, lease, max_attempts = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local retention, channel = tonumber(ARGV[4]), ARGV[5]
local meta = KEYS[1]
local state = redis.call('HGET', meta, 'state')
if not state then return -1 end -- NOT_FOUND
if TERMINAL[state] then return {4} end
local now = now_ms()

local function started(id)
  redis.call('ZADD', KEYS[3], now + lease, id)
  if state ~= 'running' then
    redis.call('HSET', meta, 'state', 'running')
    if not redis.call('HGET', meta, 'started_at') then redis.call('HSET', meta, 'started_at', now) end
  end
end

local function close_item(id, idx, status, record, counter)
  redis.call('XACK', KEYS[2], 'g', id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('HSET', KEYS[4], idx, record)
  redis.call('HINCRBY', meta, counter, 1)
end

-- Expired request: everything not yet run is marked expired, a batch per call.
local expires_at = tonumber(redis.call('HGET', meta, 'expires_at'))
if expires_at and now >= expires_at then
  local expired_record = cjson.encode({status = 'expired'})
  local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(due) do
    local e = redis.call('XRANGE', KEYS[2], id, id)
    if #e == 1 then close_item(id, entry_fields(e[1][2]), 'expired', expired_record, 'expired') end
  end
  local fresh = redis.call('XREADGROUP', 'GROUP', 'g', worker, 'COUNT', 1000, 'STREAMS', KEYS[2], '>')
  if fresh then
    for _, e in ipairs(fresh[1][2]) do close_item(e[1], entry_fields(e[2]), 'expired', expired_record, 'expired') end
  end
  if finish_if_done(now, retention, channel) then return {4} end
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if #first == 2 then return {2, math.max(tonumber(first[2]), now + 1)} end
  if #due + (fresh and #fresh[1][2] or 0) > 0 then return {2, now} end
  return {3}
end

-- Redelivery of items whose lease ran out (or whose retry time came).
for _ = 1, 100 do
  local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 1)
  if #due == 0 then break end
  local id = due[1]
  local claimed = redis.call('XCLAIM', KEYS[2], 'g', worker, 0, id)
  local e = claimed[1]
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
      close_item(id, idx, 'failed', cjson.encode(rec), 'failed')
      redis.call('ZADD', KEYS[5], now, id)
      if finish_if_done(now, retention, channel) then return {4} end
    else
      started(id)
      return {1, id, idx, payload, attempt, redis.call('HGET', meta, 'processor')}
    end
  end
end

local fresh = redis.call('XREADGROUP', 'GROUP', 'g', worker, 'COUNT', 1, 'STREAMS', KEYS[2], '>')
if fresh and fresh[1][2][1] then
  local e = fresh[1][2][1]
  local idx, payload = entry_fields(e[2])
  started(e[1])
  return {1, e[1], idx, payload, 1, redis.call('HGET', meta, 'processor')}
end

local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if #first == 2 then return {2, math.max(tonumber(first[2]), now + 1)} end
if redis.call('HGET', meta, 'finalized') ~= '1' then return {3} end
finish_if_done(now, retention, channel)
return {4}
