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
  A request of its queue's slot is cancelled and retired in one call by
  cancel_one-18 instead.
]]
--@include _common.lua
--@include _request.lua
return cancel_request(tonumber(ARGV[1]), ARGV[2])
