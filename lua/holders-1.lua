--[[
  The workers holding items of a request (delivered, not acknowledged), for
  a stream request (its group's pending summary) or a lean one (_request.lua).
  Read-only.

  Input:
    KEYS[1] items  STREAM of the request, or the HASH of a lean request

  Output:
    {worker1, count1, worker2, count2, ...} (empty when none, or no such key)
]]
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
  local h = redis.call('HGET', KEYS[1], 'h')
  if h then return {h, 1} end
  return {}
end
if kind ~= 'stream' then return {} end
local out = {}
local s = redis.call('XPENDING', KEYS[1], 'g')
for _, c in ipairs(s[4] or {}) do
  out[#out + 1] = c[1]
  out[#out + 1] = tonumber(c[2])
end
return out
