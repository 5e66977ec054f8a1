-- take_one: take one visible message, found by its id near a place in the visible list, out of
-- a standard queue: deleted, or into the outbox as the first step of a move to another queue.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping (its count of ghosts)
-- KEYS[2] visible (list): visible messages, ids or "<id>|<record>" (received from the head)
-- KEYS[3] inflight (zset): ids in flight (an id in the list may be, after a change of visibility)
-- KEYS[4] messages (hash): id -> record "<sent_ms>|<payload>"
-- KEYS[5] state (hash): id -> "<token>|<receive_count>|<first_ms>|<receive_ms>"
-- KEYS[6] origins (hash): id -> queue a moved message came from
-- KEYS[7] stats (hash): counters
-- KEYS[8] events (stream): lifecycle events
-- KEYS[9] outbox (hash): id -> "<token>|<dest>|<origin>|<count>|<first_ms>|<record>"
-- KEYS[10] outbox_at (zset): outbox ids scored by when their move began (ms)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] mode ('delete' or 'move'): what becomes of the message
-- ARGV[3] near (0-100000099): the index in the visible list where it was seen (a peek's offset plus
--         its place on the page)
-- ARGV[4] id (string, 1-64 characters): the stored id of the message
-- ARGV[5] other_id (string, '' for none): a second stored id the message may have (an id that
--         users see may be the form of one stored id, or an earlier version's stored id)
-- ARGV[6] token (string, unique per call; '' to delete): names the move, for idempotency
-- ARGV[7] destination (queue name, or '' for the queue the message came from): to move
-- ARGV[8] queue_name (string): this queue, recorded as the moved message's origin
--
-- Looks at entries near to near + WINDOW and down to near - WINDOW (receives take from the
-- head, so an entry moves toward lower indexes), nearest first, CHUNK entries a read: bounded
-- work, whatever the list's length. The entry found is not removed from the list (LREM is O(n)):
-- it is left as a ghost, as a delete of a visible message leaves one. A ghost is an id with no
-- record in `messages`: the message's record, state and origin go, an inline entry becomes its
-- plain id (LSET), and meta 'ghosts' counts one more, which receive, peek, redrive and
-- get_attributes skip or subtract. An id in flight, or with no record, is not a visible message.
--
-- 'delete' counts the message as deleted and emits 'deleted'. 'move' writes its outbox entry as
-- move_out does (a redrive: receive count 0, so it arrives as a new message), to the destination
-- or else its origin, and emits 'moved_out'; the client then runs move_in on the destination and
-- move_done here, and move_claim recovers the move if the client stops between the steps.
-- A FIFO queue is refused: its messages are not in the visible list.
--
-- Returns {OK, 0} (not found near there), {OK, 1} (deleted) or {OK, 1, id, outbox_entry} (moved
-- out); or {E_QUEUE_MISSING | E_BAD_ARGUMENT | E_LAYOUT, detail}, before any write.
local meta = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local messages = KEYS[4]
local state = KEYS[5]
local origins = KEYS[6]
local stats = KEYS[7]
local events = KEYS[8]
local outbox = KEYS[9]
local outbox_at = KEYS[10]
local mode = ARGV[2]
local near = int_arg(ARGV[3], 0, 100000099)
local wanted_id = ARGV[4]
local other_id = ARGV[5]
local token = ARGV[6]
local destination = ARGV[7]
local queue_name = ARGV[8]

local WINDOW = 100  -- entries looked at on each side of near
local CHUNK = 25  -- entries read at once (inline records may be large: read a few at a time)
local CHUNKS = WINDOW / CHUNK

if mode ~= 'delete' and mode ~= 'move' then
  return fail(E_BAD_ARGUMENT, 'mode must be delete or move')
end
if near == nil then
  return fail(E_BAD_ARGUMENT, 'near must be 0-100000099')
end
if wanted_id == '' or #wanted_id > 64 or #other_id > 64 or queue_name == '' then
  return fail(E_BAD_ARGUMENT, 'bad id or queue name')
end
if mode == 'move' and token == '' then
  return fail(E_BAD_ARGUMENT, 'a move needs a token')
end
local settings = redis.call('HMGET', meta, 'events_max', 'fifo', 'layout')
if settings[1] == false then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(settings[3]) then
  return fail(E_LAYOUT, settings[3])
end
if settings[2] == '1' then
  return fail(E_BAD_ARGUMENT, 'a FIFO queue keeps no list of visible messages: take one message from a standard queue')
end
local events_max = tonumber(settings[1]) or 0
local find, sub = string.find, string.sub

-- The id of an entry, without copying an inline record.
local function entry_id(entry)
  local bar = find(entry, '|', 1, true)
  return bar and sub(entry, 1, bar - 1) or entry
end

local function wanted(id)
  return id == wanted_id or (other_id ~= '' and id == other_id)
end

-- The index and entry of a wanted entry among entries first..last, the one nearest `last`
-- (downward) or `first` (upward); nil if none. Also whether the list ends before `last`.
local function look(first, last, downward)
  if last < first or last < 0 then
    return nil, nil, false
  end
  local entries = redis.call('LRANGE', visible, first, last)
  local n = #entries
  for j = 1, n do
    local k = downward and n + 1 - j or j
    if wanted(entry_id(entries[k])) then
      return first + k - 1, entries[k], false
    end
  end
  return nil, nil, n < last - first + 1
end

local at, entry = look(near, near, false)
for c = 1, CHUNKS do
  if at then
    break
  end
  local last = near - 1 - (c - 1) * CHUNK
  if last < 0 then
    break
  end
  at, entry = look(math.max(near - c * CHUNK, 0), last, true)
end
for c = 1, CHUNKS do
  if at then
    break
  end
  local ended
  at, entry, ended = look(near + 1 + (c - 1) * CHUNK, near + c * CHUNK, false)
  if ended then
    break
  end
end
if not at then
  return {OK, 0}
end

local id, record = split_entry(entry)
local inline = record ~= nil
if not inline then
  record = redis.call('HGET', messages, id)
  -- No record: deleted (a ghost) or gone; in flight: hidden again by a change of visibility,
  -- its list entry a ghost. Neither is a visible message.
  if not record or redis.call('ZSCORE', inflight, id) then
    return {OK, 0}
  end
end

local reply = {OK, 1}
if mode == 'move' then
  local dest = destination
  if dest == '' then
    dest = redis.call('HGET', origins, id) or ''
  end
  if dest == '' then
    return fail(E_BAD_ARGUMENT, 'the message came from no other queue: name a destination')
  end
  if dest == queue_name then
    return fail(E_BAD_ARGUMENT, 'the message is in queue ' .. queue_name .. ' already')
  end
  local now = clock(ARGV[1])
  -- As move_out's: the message leaves this queue, redriven (no receives yet).
  local out = token .. '|' .. dest .. '|' .. queue_name .. '|0|0|' .. record
  redis.call('HSET', outbox, id, out)
  redis.call('ZADD', outbox_at, now, id)
  emit(events, events_max, now, 'moved_out', id, 0, dest)
  reply[3] = id
  reply[4] = out
else
  if events_max > 0 then
    local _, receive_count = parse_state(redis.call('HGET', state, id) or '|0|0|0')
    emit(events, events_max, clock(ARGV[1]), 'deleted', id, receive_count)
  end
  redis.call('HINCRBY', stats, 'deleted', 1)
end
-- Its entry stays, a ghost: an id with no record.
redis.call('HDEL', messages, id)
redis.call('HDEL', state, id)
redis.call('HDEL', origins, id)
if inline then
  redis.call('LSET', visible, at, id)
end
redis.call('HINCRBY', meta, 'ghosts', 1)
return reply
