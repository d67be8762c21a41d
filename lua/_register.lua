--[[
  Registering a created request with its queue: the body of enqueue-9, and
  of submit_one, which creates a one-item request and registers it in one
  call. Q[1..9] are enqueue-9's KEYS, Q[10] the queue's `packed` counts
  (submit_one only); the arguments are its ARGV (tokens:
  the most tokens to make, far: true when the ready time is in a schedule
  shard; marker: the wake marker, see _common.lua, or false for
  none: submit_one hands the item off; g: the request's group, nil for
  none: its tokens get their group's places, see group_seqs; packed: true
  for a one-item request of submit_one that waits packed, which gets no reqs
  entry and no index entry but a count in Q[10], see waiting_packed; at: the time in ms when the caller has read
  it already, else nil; laned: true for one of those that waits in the lane Q[11] instead of
  holding a token, see lane_entry); returns its answer.
]]
local function register(Q, rid, p, c, dkey, delay, tokens, far, rate, marker, g, packed, at, laned)
  local m = math.min(c, tokens)

  if redis.call('HEXISTS', Q[3], rid) == 1 then return {3, rid} end
  if dkey ~= '' then
    local other = redis.call('HGET', Q[5], dkey)
    if other and is_live(Q[3], Q[1], other) then return {2, other} end
    redis.call('HSET', Q[5], dkey, rid)
  end

  local now = at or now_ms()
  if packed then count_packed(Q[10], p, 1) else redis.call('ZADD', Q[7], now, rid) end
  if rate ~= '' then redis.call('HSET', Q[8], 'lim:' .. rid, rate) end
  if delay > 0 then
    redis.call('HSET', Q[3], rid, req_value(p, c, m, 's', g))
    if not far then redis.call('ZADD', Q[6], now + delay, rid) end
    return {1, rid}
  end

  if not packed then redis.call('HSET', Q[3], rid, req_value(p, c, m, 'q', g)) end
  local seq
  if g then
    seq = group_seqs(Q[1], Q[2], Q[9], g, p, m)
  else
    seq = redis.call('INCRBY', Q[2], m) - m
  end
  if laned then
    redis.call('RPUSH', Q[11], fmt(seq + 1) .. '|' .. rid)
  else
    for k = 1, m do
      redis.call('ZADD', Q[1], fmt((99 - p) * BAND + seq + k), rid .. '#' .. k)
    end
  end
  if marker ~= false then wake(Q[4], m, marker) end
  return {0, rid}
end
