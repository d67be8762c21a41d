--[[
  Read one item of a request by entry id, whether the request keeps its items
  in a stream (read through group g) or is lean (one item in a hash, see
  _request.lua). Read-only: the dashboard's and the engine's readers use it so
  that they need not know the representation.

  Input:
    KEYS[1] items  STREAM of the request, or the HASH of a lean request
    ARGV[1] entry id

  Output:
    {index, payload, consumer, deliveries, idle ms}: consumer is the worker
    holding the item while it is delivered and not acknowledged ("" and 0
    otherwise), idle the time since its delivery (0 when not held)
    {}  no such item
]]
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
  local f = redis.call('HMGET', KEYS[1], 'e', 'i', 'p', 'h', 'd', 't')
  if f[1] ~= ARGV[1] then return {} end
  if not f[4] then return {f[2], f[3], '', 0, 0} end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  return {f[2], f[3], f[4], tonumber(f[5]) or 0, math.max(0, now - (tonumber(f[6]) or now))}
end
if kind ~= 'stream' then return {} end
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #e == 0 then return {} end
local idx, payload = '', ''
for j = 1, #e[1][2], 2 do
  if e[1][2][j] == 'i' then idx = e[1][2][j + 1] elseif e[1][2][j] == 'p' then payload = e[1][2][j + 1] end
end
local p = redis.call('XPENDING', KEYS[1], 'g', ARGV[1], ARGV[1], 1)
if #p == 1 then return {idx, payload, p[1][2], p[1][4], p[1][3]} end
return {idx, payload, '', 0, 0}
