"""The web console of ``smq serve`` under ``/console``: sign-in, the queue table, one queue's page
with its charts, messages and actions, and the create-queue form, all server-rendered HTML
(``console.css`` and ``console.js`` beside these modules).

Every action goes through the HTTP API's own actions, with the signed-in key as the sender.
May import: the rest of ``smq.server`` (its actions, context and errors) and the layers below it;
``smq.server`` imports only ``Console`` from here.
"""
