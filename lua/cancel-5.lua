--[[
  Cancel a request: items not yet started never run; items in flight finish
  and record their result. Keys expire after the retention.

  Input:
    KEYS[1..5] meta, items, leases, results, dead of the request
    ARGV[1] retention in ms
    ARGV[2] pub/sub channel for events ("" for none)

  Output:
    1   cancelled
    2   cancelled while it waited unindexed (packed, no state field yet): the
        queue's retire-13 is told, since such a request may wait in the lane
    -1  no such request
    -2  already finished
]]
--@include _common.lua
--@include _request.lua
local state = state_of(KEYS[1])
if not state then return -1 end -- NOT_FOUND
if TERMINAL[state] then return -2 end -- FINISHED
local now = now_ms()
local unindexed = redis.call('HEXISTS', KEYS[1], 'state') == 0
unpack_lean(KEYS[1], KEYS[2]) -- a one-item request that never ran ends as one that did (its item is readable)
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished_at', now)
expire_all(tonumber(ARGV[1]))
publish(KEYS[1], ARGV[2], now, 'finished')
return unindexed and 2 or 1
