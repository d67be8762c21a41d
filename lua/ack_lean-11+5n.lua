--[[
  Record the outcomes of many one-item requests of one queue's slot in one
  call (ack-5 for each in turn; every request in a queue's slot is lean, as
  submit_one creates it), and retire each request it closes from the
  queue's dispatch at once (retire-13): its token, de-dup claim and entries.

  Input:
    KEYS[1..11] tokens, reqs, held, leases, parked, dedup, sched, index,
                lastserved, rate, packed of the queue (the first 11 of retire-13's)
    KEYS[11+5j+1..11+5j+5] meta, items, leases, results, dead of the j-th request (j = 0, 1, ...)
    ARGV[1] worker id
    ARGV[2] retention in ms (for keys of a request that closes now)
    ARGV[3] pub/sub channel for events ("" for none)
    ARGV[4..] for each request in the order of KEYS: its id, the number of
              outcomes n, then n outcomes in sixes as ack-5's

  Output:
    one ack-5 answer per request, in order; one whose first element is 1
    closed now and is retired
]]
--@include _common.lua
--@include _request.lua
--@include _ack.lua
--@include _retire.lua
local Q = {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]}
local out, at, now = {}, 4, now_ms()
for j = 0, (#KEYS - 11) / 5 - 1 do
  local b = 11 + 5 * j
  R = {KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4], KEYS[b + 5]}
  local rid, n = ARGV[at], tonumber(ARGV[at + 1])
  local first = at + 2
  local answer = ack_request(ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV, first, first + 6 * n - 1, true, now)
  if answer[1] == 1 then retire_request(Q, rid, answer[4]) end
  out[j + 1] = answer
  at = first + 6 * n
end
return out
