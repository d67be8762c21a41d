--[[
  Periodic upkeep of one queue, safe for any number of workers to run at once:
  promote scheduled requests that are due (in batches), take back tokens whose
  lease ran out, wake parked tokens whose time came, and (optionally) age
  long-waiting requests up one priority level per aging interval waited.

  Input:
    KEYS[1] sched       ZSET scheduled request ids by ready time
    KEYS[2] tokens      ZSET waiting tokens
    KEYS[3] seq         STRING token order counter
    KEYS[4] reqs        HASH active requests
    KEYS[5] held        HASH token -> worker
    KEYS[6] leases      ZSET token -> lease deadline
    KEYS[7] parked      ZSET token -> wake time
    KEYS[8] wake        LIST wake markers
    KEYS[9] lastserved  HASH request id -> last claim time
    KEYS[10] packed     HASH priority -> requests waiting packed in its band (an aged one moves up)
    KEYS[11] lane       LIST "seq|rid" of one-item requests waiting in the lane (_common.lua lane_entry)
    KEYS[12] tomb       SET ids of lane requests that wait no more
    ARGV[1] batch size
    ARGV[2] aging interval in ms (0 = off)

  Output:
    {promoted ids, reaped count, unparked count, aged count}
]]
--@include _common.lua
local now, batch, aging = now_ms(), tonumber(ARGV[1]), tonumber(ARGV[2])
local woken = 0

local function requeue(token, p)
  redis.call('ZADD', KEYS[2], token_score(KEYS[3], p), token)
  woken = woken + 1
end

local promoted = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, batch)
for _, rid in ipairs(promoted) do
  redis.call('ZREM', KEYS[1], rid)
  local p, c, m, s, g = parse_req(redis.call('HGET', KEYS[4], rid))
  if p and s == 's' then
    redis.call('HSET', KEYS[4], rid, req_value(p, c, m, 'q', g))
    for k = 1, m do requeue(rid .. '#' .. k, p) end
  end
end

local reaped = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, batch)
for _, token in ipairs(reaped) do
  redis.call('ZREM', KEYS[6], token)
  redis.call('HDEL', KEYS[5], token)
  local rid, k = parse_token(token)
  local p, c = parse_req(redis.call('HGET', KEYS[4], rid))
  if p and k <= c then requeue(token, p) end
end

local due = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now, 'LIMIT', 0, batch)
for _, token in ipairs(due) do
  redis.call('ZREM', KEYS[7], token)
  local rid, k = parse_token(token)
  local p, c = parse_req(redis.call('HGET', KEYS[4], rid))
  if p and k <= c then requeue(token, p) end
end

-- Aging: the oldest token of each level below 99 whose request has waited n
-- intervals since it was last served (or first seen here) moves up n levels,
-- with all its waiting tokens of that level. The lane's head, at LANE_P, ages
-- the same way, leaving the lane for a token of its new level.
local aged = 0
local function age_lane_head()
  local head = redis.call('LINDEX', KEYS[11], 0)
  while head and redis.call('SREM', KEYS[12], select(2, lane_entry(head))) == 1 do -- waits no more
    redis.call('LPOP', KEYS[11])
    head = redis.call('LINDEX', KEYS[11], 0)
  end
  if not head then
    redis.call('DEL', KEYS[12])
    return
  end
  local score, rid = lane_entry(head)
  local last = tonumber(redis.call('HGET', KEYS[9], rid))
  if not last then
    redis.call('HSET', KEYS[9], rid, now) -- the clock starts when first seen waiting
  elseif now - last >= aging then
    local steps = math.min(99 - LANE_P, math.floor((now - last) / aging))
    redis.call('LPOP', KEYS[11])
    redis.call('ZADD', KEYS[2], fmt(score - steps * BAND), rid .. '#1')
    count_packed(KEYS[10], LANE_P, -1)
    count_packed(KEYS[10], LANE_P + steps, 1)
    redis.call('HSET', KEYS[9], rid, last + steps * aging)
    aged = aged + 1
  end
end
if aging > 0 then
  age_lane_head()
  for level = 98, 0, -1 do
    local lo = (99 - level) * BAND
    local head = redis.call('ZRANGEBYSCORE', KEYS[2], fmt(lo), '(' .. fmt(lo + BAND), 'LIMIT', 0, 1)
    if #head == 1 then
      local rid, k = parse_token(head[1])
      local last = tonumber(redis.call('HGET', KEYS[9], rid))
      local _, _, m = parse_req(redis.call('HGET', KEYS[4], rid))
      local packed = not m and k == 1 and packable(rid) -- waiting packed (waiting_packed, _common.lua)
      if packed then m = 1 end
      if not last then
        redis.call('HSET', KEYS[9], rid, now) -- the clock starts when first seen waiting
      elseif m and now - last >= aging then
        local steps = math.min(99 - level, math.floor((now - last) / aging))
        for k = 1, m do
          local token = rid .. '#' .. k
          local score = tonumber(redis.call('ZSCORE', KEYS[2], token))
          if score and score >= lo and score < lo + BAND then
            redis.call('ZADD', KEYS[2], fmt(score - steps * BAND), token)
            aged = aged + 1
          end
        end
        if packed then
          count_packed(KEYS[10], level, -1)
          count_packed(KEYS[10], level + steps, 1)
        end
        redis.call('HSET', KEYS[9], rid, last + steps * aging)
      end
    end
  end
end

if woken > 0 then wake(KEYS[8], woken) end
return {promoted, #reaped, #due, aged}
