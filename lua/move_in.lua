-- move_in: second step of a move: store messages arriving from another
-- queue's outbox, once each, however often the step is repeated.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): ids of visible messages (arrivals join the tail)
-- KEYS[3] messages (hash): id -> record "<sent_ms>|<payload>"
-- KEYS[4] state (hash): id -> receive state
-- KEYS[5] stats (hash): counters
-- KEYS[6] events (stream): lifecycle events
-- KEYS[7] arrivals (zset): "<id>:<token>" markers of moves received, scored
--         by arrival (ms); kept MARKER_TTL_MS, trimmed a few per call
-- KEYS[8] origins (hash): id -> queue a moved message came from
-- KEYS[9] fifo (hash): FIFO queues: id -> "<group> <seq> <sent_ms>"
-- KEYS[10] ordered (zset): FIFO queues: "<group> <seq> <id>", each group's messages in order
-- KEYS[11] groups (hash): FIFO queues: group -> 'r' | 'w' | messages in flight
-- KEYS[12] ready (list): FIFO queues: groups whose head may be received
-- KEYS[13] waiting (zset): FIFO queues: groups whose head is delayed
-- KEYS[14] delayed (zset): FIFO queues: ids sent while the queue had a delay
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] wake_channel (string): Pub/Sub channel that wakes long polls
-- ARGV[3] count (1-100): number of messages
-- ARGV[4..] per message, 7 entries: id (in the source's outbox), token (of
--           the move), origin (queue name), receive_count (kept on a dead-letter
--           move, 0 on redrive), first_receive_ms, the record, and the id to
--           store it under: '' to keep its id, else a new id, and the message
--           arrives as a new one (sent now: a redrive, as SQS counts it)
--
-- The marker of a move is "<id>:<token>" with the outbox's id, whatever id
-- the message is stored under, so clients of any version repeating the step
-- find it.
-- On a FIFO queue an arrival joins the tail of its group (the group named
-- in its record; a record without one, from a standard queue, makes a group
-- of its own) with a new sequence number.
-- Returns {OK, stored_n} or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local visible = KEYS[2]
local messages = KEYS[3]
local state = KEYS[4]
local stats = KEYS[5]
local events = KEYS[6]
local arrivals = KEYS[7]
local origins = KEYS[8]
local fifo = KEYS[9]
local ordered = KEYS[10]
local groups = KEYS[11]
local ready = KEYS[12]
local waiting = KEYS[13]
local delayed = KEYS[14]
local k = {meta = meta, fifo = fifo, ordered = ordered, groups = groups,
  ready = ready, waiting = waiting, delayed = delayed}
local now = clock(ARGV[1])
local wake_channel = ARGV[2]
local count = int_arg(ARGV[3], 1, 100)

local MARKER_TTL_MS = 86400000
local TRIM_MAX = 100

if count == nil or #ARGV ~= 3 + 7 * count then
  return fail(E_BAD_ARGUMENT, 'move_in takes 1 to 100 messages of 7 arguments')
end
for i = 1, count do
  local base = 7 * i - 3
  if int_arg(ARGV[base + 3], 0, 1000000000) == nil or
     int_arg(ARGV[base + 4], 0, 100000000000000) == nil or
     sent_ms_of(ARGV[base + 5]) == nil then
    return fail(E_BAD_ARGUMENT, 'bad receive count, time or record for message ' .. i)
  end
end
local settings = redis.call('HMGET', meta, 'events_max', 'fifo', 'delay_ms', 'layout', 'fair')
if settings[1] == false then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(settings[4]) then
  return fail(E_LAYOUT, settings[4])
end
local events_max = tonumber(settings[1])
local is_fifo = settings[2] == '1'
local delay_ms = tonumber(settings[3]) or 0

local stale = redis.call('ZRANGEBYSCORE', arrivals, '-inf', now - MARKER_TTL_MS, 'LIMIT', 0, TRIM_MAX)
if #stale > 0 then
  redis.call('ZREM', arrivals, unpack(stale))
end

local stored = 0
for i = 1, count do
  local base = 7 * i - 3
  local id = ARGV[base]
  local marker = id .. ':' .. ARGV[base + 1]
  local origin = ARGV[base + 2]
  local receive_count = tonumber(ARGV[base + 3])
  local record = ARGV[base + 5]
  if ARGV[base + 6] ~= '' then
    id = ARGV[base + 6]
    record = now .. string.match(record, '^%d+(|.*)$')
  end
  if redis.call('ZADD', arrivals, 'NX', now, marker) == 1 then
    redis.call('HSET', messages, id, record)
    if receive_count > 0 then
      redis.call('HSET', state, id, format_state('', receive_count, ARGV[base + 4], 0))
    else
      redis.call('HDEL', state, id)
    end
    if origin ~= '' then
      redis.call('HSET', origins, id, origin)
    end
    if is_fifo then
      fifo_add(k, id, record_group(record) or id, sent_ms_of(record), now, delay_ms)
    else
      redis.call('RPUSH', visible, id)
      if settings[5] ~= '1' and record_group(record) then
        -- A grouped message makes the queue fair, as a send does (see includes/common.lua).
        redis.call('HSET', meta, 'fair', '1')
        settings[5] = '1'
      end
    end
    stored = stored + 1
    emit(events, events_max, now, 'moved_in', id, receive_count, origin)
  end
end
if stored > 0 then
  redis.call('HINCRBY', stats, 'moved_in', stored)
  redis.call('PUBLISH', wake_channel, '1')
end
return {OK, stored}
