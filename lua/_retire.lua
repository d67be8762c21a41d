--[[
  Retiring a finished request from its queue's dispatch: the body of
  retire-13, and of ack_lean, which retires the one-item requests it closes.
  Q[1..13] are retire-13's KEYS (ack_lean passes the first 11: it retires
  only requests it closed, which hold their token); `laned`: the caller saw
  the request wait unindexed (cancel-5), so with no reqs entry and no token
  it waits in the lane (_common.lua). Returns retire-13's answer.
]]
local function retire_request(Q, rid, dkey, laned)
  local _, _, m = parse_req(redis.call('HGET', Q[2], rid))
  local packed = not m and waiting_packed(Q[1], rid) -- cancelled while it waited packed: its one token
  if packed then
    m = 1
    count_packed(Q[11], packed, -1)
  elseif not m and laned and packable(rid) and redis.call('LLEN', Q[12]) > 0 then
    lane_drop(Q[12], Q[13], rid)
    count_packed(Q[11], LANE_P, -1)
    m = 0
  end
  if dkey ~= '' and redis.call('HGET', Q[6], dkey) == rid then
    redis.call('HDEL', Q[6], dkey)
  end
  redis.call('ZREM', Q[7], rid)
  redis.call('ZREM', Q[8], rid)
  redis.call('HDEL', Q[9], rid)
  redis.call('HDEL', Q[10], 'lim:' .. rid, 'n:' .. rid)
  if not m then return 0 end
  for k = 1, m do -- none for a lane request
    local token = rid .. '#' .. k
    redis.call('ZREM', Q[1], token)
    redis.call('HDEL', Q[3], token)
    redis.call('ZREM', Q[4], token)
    redis.call('ZREM', Q[5], token)
  end
  redis.call('HDEL', Q[2], rid)
  return 1
end
