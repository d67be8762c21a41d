--[[
  Re-sealing one hash field under the newest encryption key (manage.py
  queue_reencrypt, core/engine/features/reencrypt.py): the field is replaced
  only if it still holds the value that was read, so a worker that wrote a
  newer record meanwhile keeps it.

  Input:
    KEYS[1] the HASH: a request's results, or a one-item request's items
    ARGV[1] field
    ARGV[2] its value as read
    ARGV[3] its value sealed under the newest key

  Output:
    1  replaced
    0  changed meanwhile (left to the newer write)
]]
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
