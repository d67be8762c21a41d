--[[
  Add items to a request that is not finalized (streaming submission), and
  optionally finalize it. Finalizing a request whose items are all done
  closes it.

  Input:
    KEYS[1..5] meta, items, leases, results, dead of the request
    ARGV[1] "1" to finalize after adding
    ARGV[2] retention in ms (for keys of a request that closes now)
    ARGV[3] pub/sub channel for events ("" for none)
    ARGV[4..] item payloads (JSON text), in order

  Output:
    {total items, closed now (1/0)}
    -1  no such request
    -2  the request is finished
    -4  the request is already finalized
]]
--@include _common.lua
--@include _request.lua
local total, _, _, _, finalized, state = counts(KEYS[1])
if not state then return -1 end -- NOT_FOUND
if TERMINAL[state] then return -2 end -- FINISHED
if finalized then return -4 end -- FINALIZED
for i = 4, #ARGV do
  redis.call('XADD', KEYS[2], '*', 'i', total, 'p', ARGV[i])
  total = total + 1
end
redis.call('HSET', KEYS[1], 'total', total, 'finalized', ARGV[1])
local closed = 0
if ARGV[1] == '1' and finish_if_done(now_ms(), tonumber(ARGV[2]), ARGV[3]) then closed = 1 end
return {total, closed}
