-- move_task_cancel: ask a running message move task to stop.
--
-- KEYS[1] tasks (hash): token -> task record (see common.lua)
-- KEYS[2] meta (hash): the queue's settings (read: its data layout)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): unused, kept for uniformity
-- ARGV[2] token (string): the task
--
-- A RUNNING task becomes CANCELLING; the runner holding it turns it
-- CANCELLED at its next step (messages moved stay moved). A task in any
-- other state is left as it is (the client refuses to cancel an ended one).
-- Returns {OK, record} or {E_TASK_MISSING, token}.
local tasks = KEYS[1]
local meta = KEYS[2]
local token = ARGV[2]

local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local record = redis.call('HGET', tasks, token)
local task = record and parse_task(record)
if not task then
  return fail(E_TASK_MISSING, token)
end
if task.status == 'RUNNING' then
  task.status = 'CANCELLING'
  record = format_task(task)
  redis.call('HSET', tasks, token, record)
end
return {OK, record}
