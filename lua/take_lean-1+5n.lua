--[[
  Take the items of many one-item requests of one queue's slot in one call,
  one token each (take-5 for each in turn, with N = 1), for the tokens the
  worker holds: a request whose token it does not hold gets nothing (so a
  worker may send this in the round trip that claims the token).

  Input:
    KEYS[1] held  HASH the queue's held tokens -> worker
    KEYS[1+5j+1..1+5j+5] meta, items, leases, results, dead of the j-th request (j = 0, 1, ...)
    ARGV[1] worker id
    ARGV[2] lease in ms
    ARGV[3] max attempts
    ARGV[4] retention in ms
    ARGV[5] pub/sub channel for events ("" for none)
    ARGV[6+j] the token of the j-th request

  Output:
    one take-5 answer per request, in the order of KEYS, or -3 (NOT_HELD)
    for one whose token this worker does not hold
]]
--@include _common.lua
--@include _request.lua
--@include _take.lua
local out, now = {}, now_ms()
for j = 0, (#KEYS - 1) / 5 - 1 do
  local b = 1 + 5 * j
  if redis.call('HGET', KEYS[1], ARGV[6 + j]) == ARGV[1] then
    R = {KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4], KEYS[b + 5]}
    out[j + 1] = take_request(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], 1, nil, now, true)
  else
    out[j + 1] = -3 -- NOT_HELD
  end
end
return out
