--[[
  Mark a promoted scheduled request as queued (if nothing moved it on yet).

  Input:
    KEYS[1] meta  HASH of the request
  Output:
    1 marked, 0 left as it was
]]
if redis.call('HGET', KEYS[1], 'state') == 'scheduled' then
  redis.call('HSET', KEYS[1], 'state', 'queued')
  return 1
end
return 0
