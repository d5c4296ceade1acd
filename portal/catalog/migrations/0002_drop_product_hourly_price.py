"""Drop Product.hourly_price: nothing charged or showed it (docs/billing.md, "The hourly price");
the catalogue's per-hour rate is the monthly price spread over the month's hours."""


from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("catalog", "0001_initial")]

    operations = [
        migrations.RemoveField(model_name="product", name="hourly_price"),
    ]
