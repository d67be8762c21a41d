--[[
  Retiring a finished request from its queue's dispatch: the body of
  retire-11, and of ack_lean, which retires the one-item requests it closes.
  Q[1..11] are retire-11's KEYS; returns its answer.
]]
local function retire_request(Q, rid, dkey)
  local _, _, m = parse_req(redis.call('HGET', Q[2], rid))
  local packed = not m and waiting_packed(Q[1], rid) -- cancelled while it waited packed: its one token
  if packed then
    m = 1
    count_packed(Q[11], packed, -1)
  end
  if dkey ~= '' and redis.call('HGET', Q[6], dkey) == rid then
    redis.call('HDEL', Q[6], dkey)
  end
  redis.call('ZREM', Q[7], rid)
  redis.call('ZREM', Q[8], rid)
  redis.call('HDEL', Q[9], rid)
  redis.call('HDEL', Q[10], 'lim:' .. rid, 'n:' .. rid)
  if not m then return 0 end
  for k = 1, m do
    local token = rid .. '#' .. k
    redis.call('ZREM', Q[1], token)
    redis.call('HDEL', Q[3], token)
    redis.call('ZREM', Q[4], token)
    redis.call('ZREM', Q[5], token)
  end
  redis.call('HDEL', Q[2], rid)
  return 1
end
